package app

import (
	"context"
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/loraplane/loraplane/shared/version"
)

// BuildAndRun builds a manager with build and runs it until ctx ends.
func BuildAndRun(ctx context.Context, build func(context.Context) (*App, error)) error {
	a, err := build(ctx)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Main is the whole main function of a controller binary: it parses the command line into
// the flags addFlags defines, runs until SIGTERM or SIGINT, and exits non-zero with the error
// that ended run.
func Main(name string, addFlags func(*flag.FlagSet), run func(context.Context) error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	addFlags(fs)
	printVersion := fs.Bool("version", false, "Print the version, revision and Go version, and exit.")
	_ = fs.Parse(os.Args[1:])
	if *printVersion {
		fmt.Println(name, version.Get())
		return
	}
	if err := run(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
