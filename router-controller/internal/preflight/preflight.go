// Package preflight reads a cluster and says what switching it from AIBrix's
// model-adapter-controller and model-route-controller to loraplane would do: which of
// AIBrix's Leases are held and by whom, which ModelAdapter CRD is installed and how it differs
// from loraplane's where that matters, which ModelAdapters, HTTPRoutes and ReferenceGrants
// would be taken over, and what would block or hurt the switch. It writes nothing: its client
// refuses every request but GET (ReadOnly), and it only reads.
package preflight

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/shared/aibrix"
)

// Options say how loraplane will run: the router's configuration and the Leases both
// controllers will watch (--aibrix-controller-leases).
type Options struct {
	Routes routes.Config
	Leases []types.NamespacedName
}

// report collects the sections of the output and what blocks the switch.
type report struct {
	w        io.Writer
	err      error
	blockers []string
	warnings []string
}

func (r *report) printf(format string, args ...any) {
	if r.err == nil {
		_, r.err = fmt.Fprintf(r.w, format, args...)
	}
}

func (r *report) section(title string) { r.printf("\n== %s\n", title) }

// block records something that must change before the switch; it is printed in its section
// and again in the summary.
func (r *report) block(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.blockers = append(r.blockers, msg)
	r.printf("  BLOCKS: %s\n", msg)
}

// warn records something that would hurt after the switch or on a rollback.
func (r *report) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.warnings = append(r.warnings, msg)
	r.printf("  WARNING: %s\n", msg)
}

// Run reads the cluster through reader and writes the report to w. blocked is true when
// something must change before the switch (the summary lists what).
func Run(ctx context.Context, reader client.Reader, o Options, w io.Writer) (blocked bool, err error) {
	r := &report{w: w}
	r.printf("loraplane preflight: what switching from AIBrix would do (nothing is written)\n")
	r.printf("gateway %s/%s, route timeout %s, AIBrix Leases watched: %s\n", o.Routes.GatewayNamespace, o.Routes.GatewayName,
		o.Routes.Timeout, leaseList(o.Leases))
	for _, step := range []func(context.Context, client.Reader, Options, *report) error{
		controllers, crd, adapters, modelRoutes, grants,
	} {
		if err := step(ctx, reader, o, r); err != nil {
			return false, err
		}
	}
	r.section("Summary")
	if len(r.blockers) == 0 {
		r.printf("  nothing blocks the switch; %d warning(s)\n", len(r.warnings))
	} else {
		r.printf("  %d thing(s) block the switch, %d warning(s):\n", len(r.blockers), len(r.warnings))
		for _, b := range r.blockers {
			r.printf("  - %s\n", b)
		}
	}
	return len(r.blockers) > 0, r.err
}

func leaseList(leases []types.NamespacedName) string {
	if len(leases) == 0 {
		return "none (the check is off)"
	}
	out := make([]string, len(leases))
	for i, l := range leases {
		out[i] = l.String()
	}
	return strings.Join(out, ", ")
}

// controllers reports AIBrix's controller-manager Deployments and the Leases watched.
func controllers(ctx context.Context, reader client.Reader, o Options, r *report) error {
	r.section("AIBrix's controller-manager")
	found, err := aibrix.Discover(ctx, reader)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		r.printf("  no Deployment runs AIBrix's controller-manager\n")
	}
	for _, cm := range found {
		if err := describeControllerManager(ctx, reader, o, cm, r); err != nil {
			return err
		}
	}
	for _, c := range []string{aibrix.AdapterController, aibrix.RouteController} {
		for _, why := range aibrix.Uncovered(found, o.Leases, c) {
			r.block("%s", why)
		}
	}
	for _, l := range o.Leases {
		h, err := readLease(ctx, reader, l)
		if err != nil {
			return err
		}
		r.printf("  Lease %s (watched): %s\n", l, h)
	}
	return nil
}

func describeControllerManager(ctx context.Context, reader client.Reader, o Options, cm aibrix.ControllerManager, r *report) error {
	runs := "neither of the controllers loraplane replaces"
	if len(cm.Replaces) > 0 {
		runs = strings.Join(cm.Replaces, " and ")
	}
	r.printf("  Deployment %s: %d replica(s), runs %s, leader election %v (Lease %s)\n", cm.Deployment, cm.Replicas, runs, cm.LeaderElect, cm.Lease)
	if cm.Replicas == 0 {
		r.warn("Deployment %s is scaled to zero: its webhooks are down too, among them the one that injects the aibrix-runtime sidecar "+
			"(new pods then get no sidecar and s3://, gcs://, tos:// adapters fail with ArtifactNeedsRuntime); prefer running it with "+
			"--controllers=*,-%s,-%s", cm.Deployment, aibrix.AdapterController, aibrix.RouteController)
		return nil
	}
	if len(cm.Replaces) > 0 {
		r.printf("  -> stop them: run it with --controllers=*,-%s,-%s (its webhooks keep running)\n", aibrix.AdapterController, aibrix.RouteController)
	} else if cm.LeaderElect && slices.Contains(o.Leases, cm.Lease) {
		r.block("Lease %s is watched, but Deployment %s renews it while running neither controller: the take-over would wait for ever; "+
			"leave it out of --aibrix-controller-leases", cm.Lease, cm.Deployment)
	}
	why, err := deploymentManager(ctx, reader, cm.Deployment)
	if err != nil {
		return err
	}
	if why != "" {
		r.warn("Deployment %s is kept by another manager (%s): change its replicas or flags there (Git, Helm values), "+
			"or a sync reverts a kubectl scale or edit", cm.Deployment, why)
	}
	return nil
}
