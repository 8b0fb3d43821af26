// Command adapter-controller reconciles ModelAdapters: it loads LoRA adapters onto the
// engine pods they select and publishes each adapter behind a headless Service.
package main

import (
	"context"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	"github.com/loraplane/loraplane/shared/app"
)

func main() {
	opts := setup.NewOptions()
	app.Main("adapter-controller", opts.AddFlags, func(ctx context.Context) error { return setup.Run(ctx, opts, nil) })
}
