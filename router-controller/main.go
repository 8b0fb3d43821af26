// Command router-controller publishes a Gateway API HTTPRoute per model name for every
// model workload (Deployments, StatefulSets, ModelAdapters and optional kinds).
package main

import (
	"context"

	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/shared/app"
)

func main() {
	opts := setup.NewOptions()
	app.Main("router-controller", opts.AddFlags, func(ctx context.Context) error { return setup.Run(ctx, opts, nil) })
}
