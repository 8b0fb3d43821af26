package aibrix

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AIBrix's controller names (its --controllers values, pkg/features) that loraplane replaces.
const (
	AdapterController = "model-adapter-controller"
	RouteController   = "model-route-controller"
)

// Facts of AIBrix's controller-manager (cmd/controllers/main.go, config/manager,
// config/standalone, dist/chart): its binary is /manager in the image
// aibrix/controller-manager; leader election is on with --leader-elect; the Lease is
// --leader-election-id (default aibrix-controller-manager) in --leader-election-namespace
// (default aibrix-system; its Helm chart sets the release namespace, empty means the pod's
// namespace); --controllers (default "*") is read left to right, "*" enabling every
// controller and "-name" disabling one, and a controller not named is off.
const (
	controllerManagerImage = "aibrix/controller-manager"
	defaultLeaseName       = "aibrix-controller-manager"
	defaultLeaseNamespace  = "aibrix-system"
)

// ControllerManager is a Deployment running AIBrix's controller-manager.
type ControllerManager struct {
	// Deployment is the Deployment's namespace and name.
	Deployment types.NamespacedName
	// Replicas is the larger of its desired and its current replicas: 0 when it is scaled
	// to zero and its pods are gone.
	Replicas int32
	// LeaderElect: it runs with --leader-elect, holding Lease while it runs.
	LeaderElect bool
	// Lease is the leader election Lease it holds with LeaderElect.
	Lease types.NamespacedName
	// Replaces are the controllers it runs that loraplane replaces (AdapterController,
	// RouteController), sorted.
	Replaces []string
}

// Runs reports whether it runs the AIBrix controller named (AdapterController or
// RouteController) with pods that exist or are wanted.
func (c ControllerManager) Runs(controller string) bool {
	return c.Replicas > 0 && slices.Contains(c.Replaces, controller)
}

// Discover lists every Deployment the reader may list and returns those running AIBrix's
// controller-manager: a container whose image is aibrix/controller-manager (from any
// registry, with any tag), or a container named "manager" running /manager in a Deployment
// labelled app.kubernetes.io/name=aibrix, as AIBrix's manifests and chart make it.
func Discover(ctx context.Context, reader client.Reader) ([]ControllerManager, error) {
	var list appsv1.DeploymentList
	if err := reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing Deployments to find AIBrix's controller-manager: %w", err)
	}
	var out []ControllerManager
	for i := range list.Items {
		if cm, ok := controllerManagerOf(&list.Items[i]); ok {
			out = append(out, cm)
		}
	}
	return out, nil
}

// controllerManagerOf reads d as a Deployment of AIBrix's controller-manager.
func controllerManagerOf(d *appsv1.Deployment) (ControllerManager, bool) {
	c := managerContainer(d)
	if c == nil {
		return ControllerManager{}, false
	}
	flags := parseFlags(c.Args)
	cm := ControllerManager{
		Deployment: types.NamespacedName{Namespace: d.Namespace, Name: d.Name},
		Replicas:   max(ptrOr(d.Spec.Replicas, 1), d.Status.Replicas),
		Lease:      types.NamespacedName{Namespace: defaultLeaseNamespace, Name: defaultLeaseName},
	}
	cm.LeaderElect, _ = strconv.ParseBool(flags.value("leader-elect", "false"))
	if ns, ok := flags["leader-election-namespace"]; ok {
		cm.Lease.Namespace = ns
		if ns == "" {
			cm.Lease.Namespace = d.Namespace
		}
	}
	cm.Lease.Name = flags.value("leader-election-id", defaultLeaseName)
	enabled := enabledControllers(flags.value("controllers", "*"))
	for _, name := range []string{AdapterController, RouteController} {
		if enabled[name] {
			cm.Replaces = append(cm.Replaces, name)
		}
	}
	return cm, true
}

// managerContainer returns the container of d that runs AIBrix's controller-manager, or nil.
func managerContainer(d *appsv1.Deployment) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		if imageRepository(c.Image) == controllerManagerImage ||
			d.Labels["app.kubernetes.io/name"] == "aibrix" && c.Name == "manager" && slices.Equal(c.Command, []string{"/manager"}) {
			return c
		}
	}
	return nil
}

// imageRepository returns the last two path segments of an image reference without its
// registry, tag or digest: "aibrix/controller-manager" for
// "registry.example.com/mirror/aibrix/controller-manager:v0.7.0".
func imageRepository(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	parts := strings.Split(image, "/")
	if len(parts) < 2 {
		return image
	}
	return strings.Join(parts[len(parts)-2:], "/")
}

// goFlags are the flags of a Go program's command line, as its flag package reads them:
// "-name" or "--name", "=value" or (not for booleans) the next argument. A flag without a
// value maps to "" ("true" for a boolean flag; see value).
type goFlags map[string]string

// boolFlags are the boolean flags of AIBrix's controller-manager that parseFlags meets.
var boolFlags = map[string]bool{"leader-elect": true, "metrics-secure": true, "enable-http2": true,
	"enable-runtime-sidecar": true, "disable-webhook": true, "debug-mode": true}

func parseFlags(args []string) goFlags {
	out := goFlags{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break // the flag package stops at the first non-flag
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case hasValue:
		case boolFlags[name]:
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		}
		out[name] = value
	}
	return out
}

func (f goFlags) value(name, def string) string {
	if v, ok := f[name]; ok {
		return v
	}
	return def
}

// enabledControllers reads a --controllers value as AIBrix does (pkg/features
// InitControllers): left to right, "*" enables every controller, "-name" disables one,
// "name" enables one.
func enabledControllers(value string) map[string]bool {
	out := map[string]bool{}
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "*":
			out[AdapterController], out[RouteController] = true, true
		case strings.HasPrefix(item, "-"):
			out[item[1:]] = false
		case item != "":
			out[item] = true
		}
	}
	return out
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// Uncovered returns, for each of found that runs the AIBrix controller named (AdapterController
// or RouteController), why the Leases watched would not hold the take-over back while it
// runs: it runs without leader election (no Lease to see), or its Lease is not among leases.
func Uncovered(found []ControllerManager, leases []types.NamespacedName, controller string) []string {
	var out []string
	for _, cm := range found {
		switch {
		case !cm.Runs(controller):
		case !cm.LeaderElect:
			out = append(out, fmt.Sprintf("Deployment %s runs AIBrix's %s without --leader-elect, so no Lease tells whether it runs: "+
				"scale it to 0 or drop %s from its --controllers", cm.Deployment, controller, controller))
		case !slices.Contains(leases, cm.Lease):
			out = append(out, fmt.Sprintf("Deployment %s runs AIBrix's %s holding the Lease %s, which --aibrix-controller-leases does not list: "+
				"add it (and grant get on it), scale the Deployment to 0, or drop %s from its --controllers", cm.Deployment, controller, cm.Lease, controller))
		}
	}
	return out
}

// CheckCovered refuses to start a controller while AIBrix's counterpart of it runs where the
// Leases watched cannot see it (see Uncovered): both would act on the same objects. A
// namespaced install (watchNamespaces set) does not look, as it may list no Deployments
// cluster-wide; nor does a reader refused the list: that is logged, and only the Leases
// watched guard the take-over.
func CheckCovered(ctx context.Context, reader client.Reader, leases []types.NamespacedName, controller string, watchNamespaces []string) error {
	log := klog.FromContext(ctx)
	if len(watchNamespaces) > 0 {
		log.Info("Not looking for AIBrix's controller-manager outside --aibrix-controller-leases: a namespaced install lists no Deployments cluster-wide")
		return nil
	}
	found, err := Discover(ctx, reader)
	if apierrors.IsForbidden(err) {
		log.Info("Not looking for AIBrix's controller-manager outside --aibrix-controller-leases: listing Deployments is forbidden", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if why := Uncovered(found, leases, controller); len(why) > 0 {
		return fmt.Errorf("refusing to start while AIBrix's %s runs unseen (both would act on the same objects): %w",
			controller, errors.New(strings.Join(why, "; ")))
	}
	return nil
}
