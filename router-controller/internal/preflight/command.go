package preflight

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/shared/aibrix"
	"github.com/loraplane/loraplane/shared/app"
)

// Exit codes of the preflight command.
const (
	ExitOK      = 0
	ExitError   = 1 // bad flags, or the cluster could not be read
	ExitBlocked = 2 // something must change before the switch
)

// Command is "router-controller preflight": it takes the router's flags (pass those its
// Deployment runs with, --aibrix-controller-leases being the value both controllers run
// with; its default here is the adapter-controller's, both of AIBrix's default Leases), reads
// the cluster of --kubeconfig read-only and writes the report to stdout. restConfig overrides
// the kubeconfig lookup (tests).
func Command(ctx context.Context, args []string, restConfig *rest.Config, stdout, stderr io.Writer) int {
	o := setup.NewOptions()
	o.AIBrixControllerLeases = []string{aibrix.ControllerManagerLease, aibrix.StandaloneAdapterLease}
	fs := flag.NewFlagSet("router-controller preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ExitError
	}
	fail := func(err error) int {
		_, _ = fmt.Fprintln(stderr, "router-controller preflight:", err)
		return ExitError
	}
	if err := o.Validate(); err != nil {
		return fail(err)
	}
	leases, _ := aibrix.ParseLeases(o.AIBrixControllerLeases) // validated above
	cfg := restConfig
	if cfg == nil {
		var err error
		if cfg, err = app.RESTConfig(o.Kubeconfig); err != nil {
			return fail(err)
		}
	}
	reader, err := client.New(ReadOnly(cfg), client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return fail(err)
	}
	blocked, err := Run(ctx, reader, Options{Routes: o.RoutesConfig(), Leases: leases}, stdout)
	switch {
	case err != nil:
		return fail(err)
	case blocked:
		return ExitBlocked
	}
	return ExitOK
}

// ReadOnly returns a copy of cfg whose transport refuses every request but GET and HEAD, so
// that nothing the preflight does can change the cluster.
func ReadOnly(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return readOnly{rt}
	})
	return cfg
}

type readOnly struct{ next http.RoundTripper }

func (t readOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return nil, fmt.Errorf("preflight is read-only: refusing %s %s", r.Method, r.URL.Path)
	}
	return t.next.RoundTrip(r)
}
