package engine

// What an engine pod's spec says about its adapters: whether its engine can take runtime
// adapters at all, how many it holds, and the largest rank it accepts. Only a spec that
// says so conclusively is believed: an engine container that is not recognised, a flag
// whose value is not a number, or a shell script that may add flags leaves the answer
// unknown, and unknown changes nothing (AIBrix's behaviour).

import (
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Engine defaults that bound adapters, from the engines' documentation.
const (
	// VLLMDefaultMaxLoras is vLLM's --max-loras default; --max-cpu-loras (the size of the
	// LRU cache that holds runtime-loaded adapters) defaults to --max-loras.
	VLLMDefaultMaxLoras = 1
	// VLLMDefaultMaxLoRARank is vLLM's --max-lora-rank default.
	VLLMDefaultMaxLoRARank = 16
	// RuntimeLoRAUpdatingEnv must be "1" or "true" (any case) for vLLM to serve its runtime
	// load and unload routes.
	RuntimeLoRAUpdatingEnv = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
)

// Tristate is a yes, no or unknown answer.
type Tristate int

const (
	// Unknown: the spec does not say.
	Unknown Tristate = iota
	// Yes: the spec says so.
	Yes
	// No: the spec says not.
	No
)

// PodSpec is what an engine pod's spec says about its engine.
type PodSpec struct {
	// Engine is the engine whose container was recognised ("" when none was: everything
	// else is then unknown).
	Engine Kind
	// Container is the name of the recognised engine container.
	Container string
	// Conclusive is false when a flag that matters has a value that is not a number, or the
	// container runs a shell script that may add flags or variables: absent flags then
	// prove nothing.
	Conclusive bool
	// EnableLoRA: --enable-lora, or for SGLang --lora-paths (which enables it).
	EnableLoRA bool
	// RuntimeUpdating is vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING as the container sets it.
	RuntimeUpdating Tristate
	// Flags are the integer flags given, by name without dashes (max-loras, max-cpu-loras,
	// max-loaded-loras, max-loras-per-batch, max-lora-rank).
	Flags map[string]int
}

// The integer flags read from an engine container's arguments.
const (
	FlagMaxLoras         = "max-loras"
	FlagMaxCPULoras      = "max-cpu-loras"
	FlagMaxLoadedLoras   = "max-loaded-loras"
	FlagMaxLorasPerBatch = "max-loras-per-batch"
	FlagMaxLoRARank      = "max-lora-rank"
)

var intFlags = map[string]bool{FlagMaxLoras: true, FlagMaxCPULoras: true, FlagMaxLoadedLoras: true, FlagMaxLorasPerBatch: true, FlagMaxLoRARank: true}

// InspectPod reads the engine container of the pod: for a pod of kind SGLang (label
// model.aibrix.ai/engine), the container that runs "python -m sglang.launch_server" or
// "sglang serve"; otherwise the one that runs "vllm serve" or
// "python -m vllm.entrypoints.openai.api_server", or an image of vllm/vllm-openai (whose
// entrypoint is "vllm serve") without a command. Arguments are read in both forms
// ("--flag N", "--flag=N", underscores or dashes), also inside a "sh -c" script.
func InspectPod(pod *corev1.Pod) PodSpec {
	kind := KindVLLM
	if Kind(pod.Labels[LabelEngine]) == KindSGLang {
		kind = KindSGLang
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		words, shell := commandWords(c)
		start, ok := engineStart(kind, c, words)
		if !ok {
			continue
		}
		spec := PodSpec{Engine: kind, Container: c.Name, Conclusive: !shell, Flags: map[string]int{}}
		spec.readArgs(words[start:])
		if kind == KindVLLM {
			spec.RuntimeUpdating = runtimeUpdating(c, words, shell)
		}
		return spec
	}
	return PodSpec{}
}

// commandWords returns the container's command and args as words; shell is true when they
// are a shell script (split at white space here), which may set what it does not show.
func commandWords(c *corev1.Container) (words []string, shell bool) {
	for _, w := range append(append([]string{}, c.Command...), c.Args...) {
		if strings.ContainsAny(w, " \t\n") {
			shell = true
			for _, f := range strings.Fields(w) {
				words = append(words, strings.Trim(f, `"';`))
			}
			continue
		}
		words = append(words, w)
	}
	if len(words) > 0 && (path.Base(words[0]) == "sh" || path.Base(words[0]) == "bash") {
		shell = true
	}
	return words, shell
}

// engineStart finds where the engine's own arguments start in words.
func engineStart(kind Kind, c *corev1.Container, words []string) (int, bool) {
	for i, w := range words {
		base := path.Base(w)
		next := ""
		if i+1 < len(words) {
			next = words[i+1]
		}
		switch kind {
		case KindSGLang:
			if w == "sglang.launch_server" || (base == "sglang" && next == "serve") {
				return i + 1, true
			}
		default:
			if w == "vllm.entrypoints.openai.api_server" || (base == "vllm" && next == "serve") {
				return i + 1, true
			}
		}
	}
	if kind == KindVLLM && len(c.Command) == 0 && strings.Contains(c.Image, "vllm/vllm-openai") {
		return 0, true // the image's entrypoint is "vllm serve"; args are its arguments
	}
	return 0, false
}

// readArgs reads the flags that matter from the engine's arguments.
func (s *PodSpec) readArgs(args []string) {
	for i := 0; i < len(args); i++ {
		w := args[i]
		if strings.HasPrefix(w, "$") {
			s.Conclusive = false // a variable may hold more flags
			continue
		}
		if !strings.HasPrefix(w, "--") {
			continue
		}
		name, value, inline := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		switch {
		case name == "enable-lora":
			s.EnableLoRA = !inline || value == "" || strings.EqualFold(value, "true")
		case name == "lora-paths" && s.Engine == KindSGLang:
			s.EnableLoRA = true
		case intFlags[name]:
			if !inline && i+1 < len(args) {
				i++
				value = args[i]
			}
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				s.Conclusive = false
				continue
			}
			s.Flags[name] = n
		}
	}
}

// runtimeUpdating reads VLLM_ALLOW_RUNTIME_LORA_UPDATING from the container's environment
// or an assignment in its script.
func runtimeUpdating(c *corev1.Container, words []string, shell bool) Tristate {
	for _, w := range words {
		if v, ok := strings.CutPrefix(w, RuntimeLoRAUpdatingEnv+"="); ok {
			return truthy(v)
		}
	}
	for _, e := range c.Env {
		if e.Name == RuntimeLoRAUpdatingEnv {
			if e.ValueFrom != nil {
				return Unknown
			}
			return truthy(e.Value)
		}
	}
	if len(c.EnvFrom) > 0 || shell {
		return Unknown // a ConfigMap, Secret or the script may set it
	}
	return No
}

func truthy(v string) Tristate {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true":
		return Yes
	default:
		return No
	}
}

// flag returns the value of an integer flag given.
func (s PodSpec) flag(name string) (int, bool) {
	n, ok := s.Flags[name]
	return n, ok
}

// Capacity is how many runtime adapters the engine holds without evicting one, as the spec
// says: vLLM's --max-cpu-loras, else --max-loras (its default), else 1 (vLLM's default);
// SGLang's --max-loaded-loras (unbounded without it: its GPU pool, --max-loras-per-batch,
// swaps adapters in from CPU memory and does not evict them). maxLoras, when the engine
// reported it (metrics), stands for the --max-loras flag. known is false when the spec does
// not say.
func (s PodSpec) Capacity(maxLoras int) (n int, known bool) {
	switch s.Engine {
	case KindVLLM:
		if n, ok := s.flag(FlagMaxCPULoras); ok {
			return n, true
		}
		if maxLoras > 0 {
			return maxLoras, true
		}
		if n, ok := s.flag(FlagMaxLoras); ok {
			return n, true
		}
		if s.Conclusive {
			return VLLMDefaultMaxLoras, true
		}
	case KindSGLang:
		if n, ok := s.flag(FlagMaxLoadedLoras); ok {
			return n, true
		}
	}
	if maxLoras > 0 {
		return maxLoras, true // the engine said so; its flags could not be read
	}
	return 0, false
}

// MaxRank is the largest adapter rank the engine accepts, when the spec says: vLLM's
// --max-lora-rank (default VLLMDefaultMaxLoRARank), SGLang's --max-lora-rank (without it
// SGLang infers the rank from --lora-paths, which the spec does not tell).
func (s PodSpec) MaxRank() (int, bool) {
	if n, ok := s.flag(FlagMaxLoRARank); ok {
		return n, true
	}
	if s.Engine == KindVLLM && s.Conclusive {
		return VLLMDefaultMaxLoRARank, true
	}
	return 0, false
}

// Unfit says why the engine cannot take runtime adapters of the given rank (0: undeclared),
// naming the missing flag or variable; "" when it can or the spec is not conclusive.
func (s PodSpec) Unfit(rank int) (reason Reason, msg string) {
	if s.Engine == "" {
		return "", ""
	}
	if s.Conclusive && !s.EnableLoRA {
		if s.Engine == KindSGLang {
			return ReasonLoRADisabled, "container " + s.Container + " runs SGLang without --enable-lora or --lora-paths"
		}
		return ReasonLoRADisabled, "container " + s.Container + " runs vLLM without --enable-lora"
	}
	if s.Engine == KindVLLM && s.RuntimeUpdating == No {
		return ReasonLoRAUpdatingDisabled, "container " + s.Container + " runs vLLM without " + RuntimeLoRAUpdatingEnv + "=true"
	}
	if max, ok := s.MaxRank(); ok && rank > max {
		return ReasonLoRARankTooHigh, "the adapter's rank " + strconv.Itoa(rank) + " exceeds --max-lora-rank " + strconv.Itoa(max) + " of container " + s.Container
	}
	return "", ""
}
