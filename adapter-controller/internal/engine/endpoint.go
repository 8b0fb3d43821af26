package engine

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// Kind is the kind of API an Endpoint is driven through.
type Kind string

const (
	// KindVLLM drives vLLM's runtime LoRA API. The zero Kind means KindVLLM.
	KindVLLM Kind = "vllm"
	// KindSGLang drives SGLang's LoRA API.
	KindSGLang Kind = "sglang"
	// KindRuntime drives the AIBrix runtime sidecar next to the engine.
	KindRuntime Kind = "aibrix-runtime"
)

// Pod labels, container name and ports that EndpointForPod understands.
// They match AIBrix so that AIBrix manifests apply unchanged.
const (
	// LabelEngine names the engine: "vllm" (also when absent) or "sglang".
	LabelEngine = v1alpha1.EngineLabel
	// LabelPort is the engine's HTTP port; DefaultEnginePort when absent.
	LabelPort = v1alpha1.ModelPortLabel
	// RuntimeContainerName is the container name of the AIBrix runtime
	// sidecar. A pod with it is driven through the sidecar.
	RuntimeContainerName = v1alpha1.RuntimeContainerName
	// DefaultEnginePort is the engine port when the pod has no LabelPort.
	DefaultEnginePort = v1alpha1.DefaultEnginePort
	// RuntimePort is the port of the AIBrix runtime sidecar's API.
	RuntimePort = 8080
)

// Endpoint is where and how to reach one engine pod.
//
// Endpoint implements fmt.Stringer and fmt.GoStringer without the API key,
// so it is safe to print or log.
type Endpoint struct {
	// Kind selects the API used for Load and Unload; "" means KindVLLM.
	Kind Kind
	// Host is the pod IP (IPv4 or IPv6 literal, without brackets).
	Host string
	// Port serves Load and Unload: the engine port for KindVLLM and
	// KindSGLang, the sidecar port for KindRuntime. 0 means the default for
	// Kind (DefaultEnginePort, or RuntimePort for KindRuntime).
	Port int
	// EnginePort serves the engine's own GET /v1/models, used by
	// ListAdapters. 0 means Port for KindVLLM and KindSGLang, and
	// DefaultEnginePort for KindRuntime.
	EnginePort int
	// APIKey, when not empty, is sent as "Authorization: Bearer <APIKey>".
	APIKey string
}

// String returns "<kind> <host:port>" and never the API key.
func (ep Endpoint) String() string {
	return fmt.Sprintf("%s %s", ep.kind(), ep.Address())
}

// GoString is like String, so that %#v does not print the API key either.
func (ep Endpoint) GoString() string {
	return fmt.Sprintf("engine.Endpoint{Kind:%q, Host:%q, Port:%d, EnginePort:%d, APIKey:<redacted>}",
		ep.kind(), ep.Host, ep.port(), ep.enginePort())
}

// Address returns host:port of the Load/Unload API, IPv6 hosts in brackets.
func (ep Endpoint) Address() string {
	return net.JoinHostPort(ep.Host, strconv.Itoa(ep.port()))
}

// EngineAddress returns host:port of the engine's own API (used by
// ListAdapters), IPv6 hosts in brackets.
func (ep Endpoint) EngineAddress() string {
	return net.JoinHostPort(ep.Host, strconv.Itoa(ep.enginePort()))
}

func (ep Endpoint) kind() Kind {
	if ep.Kind == "" {
		return KindVLLM
	}
	return ep.Kind
}

// port is the port the calls go to: the sidecar's for the runtime kind, else the engine's.
func (ep Endpoint) port() int {
	if ep.kind() == KindRuntime {
		return cmp.Or(ep.Port, RuntimePort)
	}
	return cmp.Or(ep.Port, DefaultEnginePort)
}

// enginePort is the engine's own port (behind the sidecar for the runtime kind).
func (ep Endpoint) enginePort() int {
	if ep.kind() == KindRuntime {
		return cmp.Or(ep.EnginePort, DefaultEnginePort)
	}
	return cmp.Or(ep.EnginePort, ep.port())
}

// validate checks what will be dialled and sent, so that a hand-built
// Endpoint cannot make the client dial a host name or send a broken header.
func (ep Endpoint) validate(op Op) *Error {
	invalid := func(format string, args ...any) *Error {
		return &Error{Reason: ReasonInvalidEndpoint, Engine: ep.kind(), Op: op, Message: fmt.Sprintf(format, args...)}
	}
	switch ep.kind() {
	case KindVLLM, KindSGLang, KindRuntime:
	default:
		return &Error{Reason: ReasonEngineUnsupported, Engine: ep.kind(), Op: op,
			Message: fmt.Sprintf("unknown engine kind %q", string(ep.Kind))}
	}
	if _, err := parsePodIP(ep.Host); err != nil {
		return invalid("%v", err)
	}
	if !validPort(ep.port()) || !validPort(ep.enginePort()) {
		return invalid("port %d or engine port %d is out of range 1-65535", ep.port(), ep.enginePort())
	}
	if !validHeaderValue(ep.APIKey) {
		return invalid("the API key contains characters that are not allowed in an HTTP header")
	}
	return nil
}

// EndpointOptions say how engine pods are addressed.
type EndpointOptions struct {
	// RuntimeSidecar drives a pod with a container (or restartable init container) named
	// aibrix-runtime through that sidecar, as AIBrix's controller does with
	// --enable-runtime-sidecar (set in AIBrix's shipped manifests). Without it every pod is
	// driven through its engine's own API, sidecar or not.
	RuntimeSidecar bool
}

// EndpointForPod returns the Endpoint of an engine pod.
//
// The kind comes from the pod label model.aibrix.ai/engine: absent or "vllm"
// is KindVLLM, "sglang" is KindSGLang, any other value is an error with
// ReasonEngineUnsupported. With opts.RuntimeSidecar, a pod with a container
// (or restartable init container) named aibrix-runtime is driven through that
// sidecar at RuntimePort instead (KindRuntime). The engine port comes from the label
// model.aibrix.ai/port (DefaultEnginePort when absent). The host is
// pod.Status.PodIP, which must be an IP address; nothing else is dialled.
// apiKey is trimmed of surrounding white space (Secrets often end in a
// newline).
func EndpointForPod(pod *corev1.Pod, apiKey string, opts EndpointOptions) (Endpoint, error) {
	invalid := func(reason Reason, format string, args ...any) (Endpoint, error) {
		return Endpoint{}, &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if pod == nil {
		return invalid(ReasonInvalidEndpoint, "no pod given")
	}
	name := pod.Namespace + "/" + pod.Name

	kind := KindVLLM
	if v, ok := pod.Labels[LabelEngine]; ok {
		switch Kind(v) {
		case KindVLLM:
		case KindSGLang:
			kind = KindSGLang
		default:
			return invalid(ReasonEngineUnsupported, "pod %s: label %s=%q names an unsupported engine (want %q or %q)",
				name, LabelEngine, v, KindVLLM, KindSGLang)
		}
	}

	port, err := v1alpha1.EnginePort(pod.Labels)
	if err != nil {
		return invalid(ReasonInvalidEndpoint, "pod %s: %v", name, err)
	}
	enginePort := int(port)

	host, err := parsePodIP(pod.Status.PodIP)
	if err != nil {
		return invalid(ReasonInvalidEndpoint, "pod %s: %v", name, err)
	}

	apiKey = strings.TrimSpace(apiKey)
	if !validHeaderValue(apiKey) {
		return invalid(ReasonInvalidEndpoint, "pod %s: the API key contains characters that are not allowed in an HTTP header", name)
	}

	ep := Endpoint{Kind: kind, Host: host, Port: enginePort, EnginePort: enginePort, APIKey: apiKey}
	if opts.RuntimeSidecar && hasRuntimeSidecar(pod) {
		ep.Kind = KindRuntime
		ep.Port = RuntimePort
	}
	return ep, nil
}

func hasRuntimeSidecar(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == RuntimeContainerName {
			return true
		}
	}
	// A native sidecar is an init container that keeps running.
	for _, c := range pod.Spec.InitContainers {
		if c.Name == RuntimeContainerName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return true
		}
	}
	return false
}

// parsePodIP returns the canonical text of an IP address without zone.
func parsePodIP(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("pod has no IP address in its status yet")
	}
	addr, err := netip.ParseAddr(s)
	if err != nil || addr.Zone() != "" {
		return "", fmt.Errorf("pod IP %q is not an IP address", s)
	}
	if addr.IsUnspecified() || addr.IsMulticast() {
		return "", fmt.Errorf("pod IP %q cannot be dialled", s)
	}
	return addr.String(), nil
}

func validPort(p int) bool { return p >= 1 && p <= 65535 }

// validHeaderValue rejects control characters other than tab, which net/http
// would refuse to send (and might echo in its error).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
