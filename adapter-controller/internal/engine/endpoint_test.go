package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEndpointForPod(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	type podOpts struct {
		labels     map[string]string
		containers []string
		sidecar    string // name of a restartable init container
		initOnly   string // name of a plain init container
		ip         string
	}
	makePod := func(o podOpts) *corev1.Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "engine-0", Labels: o.labels},
			Status:     corev1.PodStatus{PodIP: o.ip},
		}
		for _, c := range append([]string{"engine"}, o.containers...) {
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c})
		}
		if o.sidecar != "" {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: o.sidecar, RestartPolicy: &always})
		}
		if o.initOnly != "" {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: o.initOnly})
		}
		return pod
	}
	cases := map[string]struct {
		pod       *corev1.Pod
		apiKey    string
		noRuntime bool // --enable-runtime-sidecar=false
		want      Endpoint
		wantErr   *errView
	}{
		"defaults: vLLM on 8000": {
			pod:  makePod(podOpts{ip: "127.0.40.7"}),
			want: Endpoint{Kind: KindVLLM, Host: "127.0.40.7", Port: 8000, EnginePort: 8000},
		},
		"explicit vllm, custom port, API key trimmed": {
			pod:    makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelEngine: "vllm", LabelPort: "9000"}}),
			apiKey: "sk-key\n",
			want:   Endpoint{Kind: KindVLLM, Host: "127.0.40.7", Port: 9000, EnginePort: 9000, APIKey: "sk-key"},
		},
		"sglang": {
			pod:  makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelEngine: "sglang", LabelPort: "30000"}}),
			want: Endpoint{Kind: KindSGLang, Host: "127.0.40.7", Port: 30000, EnginePort: 30000},
		},
		"runtime sidecar container": {
			pod:  makePod(podOpts{ip: "127.0.40.7", containers: []string{"aibrix-runtime"}}),
			want: Endpoint{Kind: KindRuntime, Host: "127.0.40.7", Port: 8080, EnginePort: 8000},
		},
		"runtime sidecar with sglang on a custom port": {
			pod:  makePod(podOpts{ip: "127.0.40.7", containers: []string{"aibrix-runtime"}, labels: map[string]string{LabelEngine: "sglang", LabelPort: "30000"}}),
			want: Endpoint{Kind: KindRuntime, Host: "127.0.40.7", Port: 8080, EnginePort: 30000},
		},
		"runtime as a native sidecar": {
			pod:  makePod(podOpts{ip: "127.0.40.7", sidecar: "aibrix-runtime"}),
			want: Endpoint{Kind: KindRuntime, Host: "127.0.40.7", Port: 8080, EnginePort: 8000},
		},
		"runtime sidecar not enabled: the engine is driven": {
			pod:       makePod(podOpts{ip: "127.0.40.7", containers: []string{"aibrix-runtime"}}),
			noRuntime: true,
			want:      Endpoint{Kind: KindVLLM, Host: "127.0.40.7", Port: 8000, EnginePort: 8000},
		},
		"native runtime sidecar not enabled, sglang": {
			pod:       makePod(podOpts{ip: "127.0.40.7", sidecar: "aibrix-runtime", labels: map[string]string{LabelEngine: "sglang", LabelPort: "30000"}}),
			noRuntime: true,
			want:      Endpoint{Kind: KindSGLang, Host: "127.0.40.7", Port: 30000, EnginePort: 30000},
		},
		"plain init container named aibrix-runtime is not a sidecar": {
			pod:  makePod(podOpts{ip: "127.0.40.7", initOnly: "aibrix-runtime"}),
			want: Endpoint{Kind: KindVLLM, Host: "127.0.40.7", Port: 8000, EnginePort: 8000},
		},
		"IPv6": {
			pod:  makePod(podOpts{ip: "fd00:10::7"}),
			want: Endpoint{Kind: KindVLLM, Host: "fd00:10::7", Port: 8000, EnginePort: 8000},
		},
		"unknown engine": {
			pod:     makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelEngine: "tgi"}}),
			wantErr: &errView{Reason: ReasonEngineUnsupported, Message: `pod ns/engine-0: label model.aibrix.ai/engine="tgi" names an unsupported engine (want "vllm" or "sglang")`},
		},
		"empty engine label": {
			pod:     makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelEngine: ""}}),
			wantErr: &errView{Reason: ReasonEngineUnsupported, Message: `pod ns/engine-0: label model.aibrix.ai/engine="" names an unsupported engine (want "vllm" or "sglang")`},
		},
		"unknown engine with runtime sidecar": {
			pod:     makePod(podOpts{ip: "127.0.40.7", containers: []string{"aibrix-runtime"}, labels: map[string]string{LabelEngine: "VLLM"}}),
			wantErr: &errView{Reason: ReasonEngineUnsupported, Message: `pod ns/engine-0: label model.aibrix.ai/engine="VLLM" names an unsupported engine (want "vllm" or "sglang")`},
		},
		"port not a number": {
			pod:     makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelPort: "http"}}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: label model.aibrix.ai/port value "http" is not a decimal number`},
		},
		"port zero": {
			pod:     makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelPort: "0"}}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: label model.aibrix.ai/port value "0" is out of range 1-65535`},
		},
		"port too large": {
			pod:     makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelPort: "65536"}}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: label model.aibrix.ai/port value "65536" is out of range 1-65535`},
		},
		"port empty": {
			pod:     makePod(podOpts{ip: "127.0.40.7", labels: map[string]string{LabelPort: ""}}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: label model.aibrix.ai/port value "" is not a decimal number`},
		},
		"no pod IP": {
			pod:     makePod(podOpts{}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: "pod ns/engine-0: pod has no IP address in its status yet"},
		},
		"pod IP is a host name": {
			pod:     makePod(podOpts{ip: "engine-0.example.com"}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: pod IP "engine-0.example.com" is not an IP address`},
		},
		"pod IP with a zone": {
			pod:     makePod(podOpts{ip: "fe80::1%eth0"}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: pod IP "fe80::1%eth0" is not an IP address`},
		},
		"unspecified pod IP": {
			pod:     makePod(podOpts{ip: "0.0.0.0"}),
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: `pod ns/engine-0: pod IP "0.0.0.0" cannot be dialled`},
		},
		"API key with a control character": {
			pod:     makePod(podOpts{ip: "127.0.40.7"}),
			apiKey:  "sk-a\x00b",
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: "pod ns/engine-0: the API key contains characters that are not allowed in an HTTP header"},
		},
		"nil pod": {
			wantErr: &errView{Reason: ReasonInvalidEndpoint, Message: "no pod given"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := EndpointForPod(tc.pod, tc.apiKey, EndpointOptions{RuntimeSidecar: !tc.noRuntime})
			if diff := cmp.Diff(tc.wantErr, viewOf(err)); diff != "" {
				t.Errorf("EndpointForPod() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("EndpointForPod() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEndpointAddresses(t *testing.T) {
	cases := map[string]struct {
		ep                  Endpoint
		wantAddr, wantEng   string
		wantString          string
		wantGoStringContain string
	}{
		"IPv4 vLLM": {
			ep:       Endpoint{Host: "127.0.40.7", Port: 9000, APIKey: "sk-secret"},
			wantAddr: "127.0.40.7:9000", wantEng: "127.0.40.7:9000", wantString: "vllm 127.0.40.7:9000",
		},
		"IPv6 is bracketed": {
			ep:       Endpoint{Kind: KindSGLang, Host: "fd00::7", APIKey: "sk-secret"},
			wantAddr: "[fd00::7]:8000", wantEng: "[fd00::7]:8000", wantString: "sglang [fd00::7]:8000",
		},
		"runtime defaults": {
			ep:       Endpoint{Kind: KindRuntime, Host: "127.0.40.7", APIKey: "sk-secret"},
			wantAddr: "127.0.40.7:8080", wantEng: "127.0.40.7:8000", wantString: "aibrix-runtime 127.0.40.7:8080",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := []string{tc.ep.Address(), tc.ep.EngineAddress(), tc.ep.String()}
			if diff := cmp.Diff([]string{tc.wantAddr, tc.wantEng, tc.wantString}, got); diff != "" {
				t.Errorf("Address, EngineAddress, String mismatch (-want +got):\n%s", diff)
			}
			for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
				if s := fmt.Sprintf(format, tc.ep); strings.Contains(s, "sk-secret") || !strings.Contains(s, tc.ep.Host) {
					t.Errorf("Sprintf(%q) = %q: want the host and not the API key", format, s)
				}
			}
		})
	}
}
