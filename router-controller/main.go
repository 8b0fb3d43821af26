// Command router-controller publishes a Gateway API HTTPRoute per model name for every
// model workload (Deployments, StatefulSets, ModelAdapters and optional kinds).
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/modelplane/modelplane/router-controller/internal/setup"
)

func main() {
	fs := flag.NewFlagSet("router-controller", flag.ExitOnError)
	opts := setup.NewOptions()
	opts.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := setup.Run(ctrl.SetupSignalHandler(), opts, nil); err != nil {
		fmt.Fprintln(os.Stderr, "router-controller:", err)
		os.Exit(1)
	}
}
