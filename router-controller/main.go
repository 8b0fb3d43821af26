// Command router-controller publishes a Gateway API HTTPRoute per model name for every
// model workload (Deployments, StatefulSets, ModelAdapters and optional kinds).
//
// "router-controller preflight [flags]" instead reads the cluster and prints what switching
// it from AIBrix's controllers would do, writing nothing (package preflight).
package main

import (
	"context"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/loraplane/loraplane/router-controller/internal/preflight"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/shared/app"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "preflight" {
		os.Exit(preflight.Command(ctrl.SetupSignalHandler(), os.Args[2:], nil, os.Stdout, os.Stderr))
	}
	opts := setup.NewOptions()
	app.Main("router-controller", opts.AddFlags, func(ctx context.Context) error { return setup.Run(ctx, opts, nil) })
}
