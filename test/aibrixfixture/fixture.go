// Package aibrixfixture builds the objects AIBrix's controller-manager writes, exactly as it
// writes them, for the tests of the switch-over from AIBrix. AIBrix is not on the Go module
// proxy, so its controllers cannot run in CI: the objects are written from the facts of its
// source (pkg/controller/modeladapter, pkg/controller/modelrouter), one YAML template each
// in objects/, whose comments say where each field comes from.
//
// The objects come out as unstructured; To converts one into a typed object of the caller's
// scheme (this module imports neither the Gateway API nor the ModelAdapter types).
package aibrixfixture

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

//go:embed objects/*.yaml
var objects embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join": strings.Join,
}).ParseFS(objects, "objects/*.yaml"))

// FieldManager is the field manager of AIBrix's controller-manager: the API server names the
// manager of a write after the client's user agent, whose program name is that of AIBrix's
// binary, /manager (build/container/Dockerfile; cmd/controllers sets no user agent). Create
// the objects with client.FieldOwner(FieldManager) so that their managedFields are AIBrix's.
const FieldManager = "manager"

// DefaultPaths are the path prefixes of AIBrix's model routes in its newest sources
// (pkg/controller/modelrouter modelPaths, after August 2026), in its order.
var DefaultPaths = []string{
	"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
	"/v1/rerank", "/v1/classify", "/v1/decisions", "/generate", "/generatevideo", "/v1/video",
	"/v1/videos", "/v1/audio/transcriptions", "/v1/audio/translations", "/tokenize", "/pooling",
}

// V070Paths are the path prefixes of AIBrix's model routes in its release v0.7.0 (and its
// sources up to August 2026), in its order: the routes a fleet switching from that release
// has.
var V070Paths = []string{
	"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
	"/v1/rerank", "/v1/classify", "/generate", "/generatevideo", "/v1/audio/transcriptions",
	"/v1/audio/translations",
}

// Request timeouts AIBrix's model router writes when AIBRIX_GATEWAY_TIMEOUT_SECONDS is unset.
const (
	// DefaultTimeout is its newest sources' (after August 2026): 600 s.
	DefaultTimeout = "600s"
	// V070Timeout is that of its releases v0.4.0 to v0.7.0 and its sources up to August 2026: 120 s.
	V070Timeout = "120s"
)

// Route describes the HTTPRoute AIBrix's model router makes for a workload.
type Route struct {
	// Name is the route's name: AIBrix's ModelRouterName(Model), worked out by the caller.
	Name  string
	Model string
	// Namespace, Service and Port are the workload's: its namespace, Service (the model
	// name unless annotated) and port label (8000 by default).
	Namespace string
	Service   string
	Port      int32
	// Paths default to DefaultPaths; custom paths follow them.
	Paths []string
	// GatewayNamespace and Gateway default to aibrix-system and aibrix-eg.
	GatewayNamespace string
	Gateway          string
	// ConsoleManaged: the workload was made by AIBrix Console.
	ConsoleManaged bool
	// Timeout is the rule's request timeout, "<AIBRIX_GATEWAY_TIMEOUT_SECONDS>s"; it defaults
	// to DefaultTimeout (AIBrix's newest default; V070Timeout for a route of v0.7.0).
	Timeout string
}

// Grant describes the ReferenceGrant AIBrix's model router makes in a workload namespace.
type Grant struct {
	Namespace string
	// GatewayNamespace defaults to aibrix-system.
	GatewayNamespace string
}

// Adapter describes a ModelAdapter AIBrix's model-adapter-controller has loaded.
type Adapter struct {
	Name, Namespace string
	// BaseModel is spec.baseModel and the value of the pod selector's model.aibrix.ai/name.
	BaseModel   string
	ArtifactURL string
	// Replicas is spec.replicas (0: unset, every candidate).
	Replicas int32
	// Instances are the pods holding the adapter, in load order; Candidates the matching
	// ready pods.
	Instances  []string
	Candidates int
	// ScheduledPods and RetryPods fill the scheduled-pods annotation and the per-pod retry
	// annotations.
	ScheduledPods []string
	RetryPods     []string
}

// AdapterObjects describes the Service and EndpointSlice of an adapter.
type AdapterObjects struct {
	Name, Namespace, BaseModel string
	// UID is the adapter's, for the owner reference.
	UID string
	// Addresses are the instances' pod IPs.
	Addresses []string
}

// Lease describes the leader election Lease of AIBrix's controller-manager.
type Lease struct {
	// Namespace and Name default to aibrix-system and aibrix-controller-manager.
	Namespace, Name string
	Holder          string
	Renewed         time.Time
}

// ControllerManager describes the Deployment of AIBrix's controller-manager.
type ControllerManager struct {
	// Namespace and Name default to aibrix-system and aibrix-controller-manager (its
	// kustomize install).
	Namespace, Name string
	// Image defaults to aibrix/controller-manager:v0.7.0.
	Image string
	// Args default to those of its kustomize install: --leader-elect,
	// --health-probe-bind-address=:8081, --metrics-bind-address=:8080, --enable-runtime-sidecar.
	Args []string
	// Replicas is spec.replicas.
	Replicas int32
}

// ControllerManagerDeployment renders the Deployment.
func ControllerManagerDeployment(c ControllerManager) (*unstructured.Unstructured, error) {
	c.Namespace = or(c.Namespace, "aibrix-system")
	c.Name = or(c.Name, "aibrix-controller-manager")
	c.Image = or(c.Image, "aibrix/controller-manager:v0.7.0")
	if c.Args == nil {
		c.Args = []string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8080", "--enable-runtime-sidecar"}
	}
	return render("deployment.yaml", c)
}

// HTTPRoute renders the route.
func HTTPRoute(r Route) (*unstructured.Unstructured, error) {
	r.GatewayNamespace = or(r.GatewayNamespace, "aibrix-system")
	r.Gateway = or(r.Gateway, "aibrix-eg")
	if len(r.Paths) == 0 {
		r.Paths = DefaultPaths
	}
	if r.Port == 0 {
		r.Port = 8000
	}
	r.Timeout = or(r.Timeout, DefaultTimeout)
	return render("httproute.yaml", r)
}

// ReferenceGrant renders the grant.
func ReferenceGrant(g Grant) (*unstructured.Unstructured, error) {
	g.GatewayNamespace = or(g.GatewayNamespace, "aibrix-system")
	return render("referencegrant.yaml", g)
}

// ModelAdapter renders the adapter with its status (written by a status update: create
// the object, then update its status with the same status).
func ModelAdapter(a Adapter) (*unstructured.Unstructured, error) {
	if a.Instances == nil {
		a.Instances = []string{}
	}
	return render("modeladapter.yaml", a)
}

// Service renders the adapter's Service.
func Service(o AdapterObjects) (*unstructured.Unstructured, error) {
	return render("service.yaml", o)
}

// EndpointSlice renders the adapter's EndpointSlice.
func EndpointSlice(o AdapterObjects) (*unstructured.Unstructured, error) {
	return render("endpointslice.yaml", o)
}

// ControllerManagerLease renders the Lease, acquired an hour before its renewal.
func ControllerManagerLease(l Lease) (*unstructured.Unstructured, error) {
	const micro = "2006-01-02T15:04:05.000000Z07:00"
	return render("lease.yaml", map[string]string{
		"Namespace": or(l.Namespace, "aibrix-system"), "Name": or(l.Name, "aibrix-controller-manager"),
		"Holder": l.Holder, "Acquired": l.Renewed.Add(-time.Hour).UTC().Format(micro), "Renewed": l.Renewed.UTC().Format(micro),
	})
}

// To converts a rendered object into out, a typed object (e.g. *gatewayv1.HTTPRoute).
func To(u *unstructured.Unstructured, out runtime.Object) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true)
}

func render(name string, values any) (*unstructured.Unstructured, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, values); err != nil {
		return nil, fmt.Errorf("rendering %s: %w", name, err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b.Bytes(), &u.Object); err != nil {
		return nil, fmt.Errorf("rendering %s: %w\n%s", name, err, b.String())
	}
	return u, nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
