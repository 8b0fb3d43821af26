// Command adapter-controller reconciles ModelAdapters: it loads LoRA adapters onto the
// engine pods they select and publishes each adapter behind a headless Service.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/modelplane/modelplane/adapter-controller/internal/setup"
)

func main() {
	fs := flag.NewFlagSet("adapter-controller", flag.ExitOnError)
	opts := setup.NewOptions()
	opts.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := setup.Run(ctrl.SetupSignalHandler(), opts, nil); err != nil {
		fmt.Fprintln(os.Stderr, "adapter-controller:", err)
		os.Exit(1)
	}
}
