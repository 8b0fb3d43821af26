// Command adapter-controller reconciles ModelAdapters: it loads LoRA adapters onto the
// engine pods they select and publishes each adapter behind a headless Service.
package main

import (
	"context"

	"github.com/modelplane/modelplane/adapter-controller/internal/setup"
	"github.com/modelplane/modelplane/shared/app"
)

func main() {
	opts := setup.NewOptions()
	app.Main("adapter-controller", opts.AddFlags, func(ctx context.Context) error { return setup.Run(ctx, opts, nil) })
}
