package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

const (
	apiKeyAnnotation  = "fake-engine.loraplane.dev/api-key"
	preloadAnnotation = "fake-engine.loraplane.dev/preload" // name=path: the engine holds it from the start
	keySecret         = "engine-key"
	maxModelsPerNS    = 3
	maxAdaptersPer    = 3
)

// replicas of each controller in hack/stack.sh, with their plain-HTTP metrics endpoints.
var replicas = map[string][2]string{
	"adapter-controller": {"adapter-controller", "adapter-controller-standby"},
	"router-controller":  {"router-controller", "router-controller-standby"},
}

var metricsURL = map[string]string{
	"adapter-controller":         "http://127.0.0.1:18080/metrics",
	"adapter-controller-standby": "http://127.0.0.1:18082/metrics",
	"router-controller":          "http://127.0.0.1:18090/metrics",
	"router-controller-standby":  "http://127.0.0.1:18092/metrics",
}

// slowPaths are the collections each controller's informers list: a slow restart holds back
// their initial lists.
var slowPaths = map[string][]string{
	"adapter-controller": {"/apis/model.aibrix.ai/v1alpha1/modeladapters", "/api/v1/pods", "/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"},
	"router-controller": {"/apis/apps/v1/deployments", "/apis/apps/v1/statefulsets", "/apis/gateway.networking.k8s.io/v1/httproutes",
		"/apis/gateway.networking.k8s.io/v1beta1/referencegrants", "/apis/model.aibrix.ai/v1alpha1/modeladapters", "/api/v1/services"},
}

// driver makes the changes and injects the faults.
type driver struct {
	o      options
	k8s    client.Client
	rng    *rand.Rand
	world  *world
	proxy  *testenv.SlowProxy
	report *report
	step   int
	focus  *model // the model whose engines the step's engine faults hit
	// lastKill is when a fault last killed controller processes.
	lastKill time.Time
	logf     func(format string, args ...any)
}

// retry calls fn until it succeeds, is answered "not found" on a delete path (ignored by the
// caller), or a minute has passed: the API server may be restarting under the driver too.
func (d *driver) retry(ctx context.Context, what string, fn func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (d *driver) name(kind string) string {
	d.world.next++
	return fmt.Sprintf("%s%d", kind, d.world.next)
}

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// op is one change the driver can make; it returns false when the world does not allow it.
type op struct {
	kind string
	do   func(ctx context.Context, ns string) (bool, error)
}

func (d *driver) ops() []op {
	return []op{
		{"create-model", d.createModel}, {"create-model", d.createModel},
		{"scale-model", d.scaleModel}, {"scale-model", d.scaleModel},
		{"delete-model", d.deleteModel},
		{"create-adapter", d.createAdapter}, {"create-adapter", d.createAdapter}, {"create-adapter", d.createAdapter},
		{"delete-adapter", d.deleteAdapter}, {"delete-adapter", d.deleteAdapter},
		{"new-version", d.newVersion},
	}
}

// randomOp makes one change in a random namespace, trying other changes when the world
// does not allow the first one picked.
func (d *driver) randomOp(ctx context.Context) error {
	ops := d.ops()
	for range 20 {
		o := pick(d.rng, ops)
		ns := pick(d.rng, d.world.namespace)
		ok, err := o.do(ctx, ns)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", o.kind, ns, err)
		}
		if ok {
			d.report.Operations[o.kind]++
			return nil
		}
	}
	return nil
}

func (d *driver) createModel(ctx context.Context, ns string) (bool, error) {
	d.world.mu.Lock()
	if len(d.world.modelsOf(ns)) >= maxModelsPerNS {
		d.world.mu.Unlock()
		return false, nil
	}
	m := &model{ns: ns, name: d.name(ns + "-m"), replicas: 1 + d.rng.IntN(4), keyed: d.rng.IntN(3) == 0}
	// One model in two has engines of a small capacity (1 to 3 adapters, below what its
	// adapters and static adapter can ask of a pod): placement must never exceed it.
	if d.rng.IntN(2) == 0 {
		m.capacity, m.cpuLoras = 1+d.rng.IntN(3), d.rng.IntN(2) == 0
		d.report.Operations["models with capacity-limited engines"]++
	}
	// One model in two holds a static adapter named like an existing ModelAdapter (of
	// another model: this one has none yet), in any namespace.
	if names := d.world.allAdapterNames(); len(names) > 0 && d.rng.IntN(2) == 0 {
		m.static = pick(d.rng, names)
		d.report.Operations["models with a static adapter"]++
	}
	key := d.world.keys[ns]
	d.world.models[ns+"/"+m.name] = m
	d.world.mu.Unlock()
	return true, d.create(ctx, deployment(m, key))
}

// create creates obj, retrying; "already exists" after a retry means an earlier attempt got
// through.
func (d *driver) create(ctx context.Context, obj client.Object) error {
	return d.retry(ctx, fmt.Sprintf("create %T %s", obj, obj.GetName()), func() error {
		err := d.k8s.Create(ctx, obj.DeepCopyObject().(client.Object))
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func deployment(m *model, key string) *appsv1.Deployment {
	labels := map[string]string{v1alpha1.ModelNameLabel: m.name, v1alpha1.ModelPortLabel: "8000", v1alpha1.AdapterEnabledLabel: "true"}
	ann := map[string]string{}
	if m.keyed {
		ann[apiKeyAnnotation] = key
	}
	if m.static != "" {
		ann[preloadAnnotation] = m.static + "=" + staticPath(m.static)
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: m.ns, Labels: map[string]string{v1alpha1.ModelNameLabel: m.name, v1alpha1.ModelPortLabel: "8000"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(m.replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: m.name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers:  []corev1.Container{engineContainer(m)},
				},
			},
		},
	}
}

// engineContainer is a model's engine: without a capacity an unknown image, as the soak has
// always run (the controllers know nothing of its engine); with one, a vLLM command line
// with runtime LoRA updating on and its LoRA flags (capacityArgs).
func engineContainer(m *model) corev1.Container {
	c := corev1.Container{Name: "engine", Image: "ghcr.io/loraplane/fake-engine:soak", Ports: []corev1.ContainerPort{{ContainerPort: 8000}}}
	if m.capacity > 0 {
		c.Name, c.Command, c.Args = "vllm", []string{"vllm", "serve"}, m.capacityArgs()
		c.Env = []corev1.EnvVar{{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "true"}}
	}
	return c
}

func (d *driver) scaleModel(ctx context.Context, ns string) (bool, error) {
	d.world.mu.Lock()
	ms := d.world.modelsOf(ns)
	if len(ms) == 0 {
		d.world.mu.Unlock()
		return false, nil
	}
	m := pick(d.rng, ms)
	n := 1 + d.rng.IntN(4)
	if n == m.replicas {
		n = n%4 + 1
	}
	m.replicas = n
	d.world.mu.Unlock()
	return true, d.patchDeployment(ctx, ns, m.name, func(dep *appsv1.Deployment) { dep.Spec.Replicas = ptr.To(int32(n)) })
}

func (d *driver) patchDeployment(ctx context.Context, ns, name string, change func(*appsv1.Deployment)) error {
	return d.retry(ctx, "update Deployment "+name, func() error {
		dep := &appsv1.Deployment{}
		if err := d.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dep); err != nil {
			return err
		}
		patch := client.MergeFrom(dep.DeepCopy())
		change(dep)
		return d.k8s.Patch(ctx, dep, patch)
	})
}

// deleteModel deletes a model's adapters, then its Deployment, as a user retiring a model would.
func (d *driver) deleteModel(ctx context.Context, ns string) (bool, error) {
	d.world.mu.Lock()
	ms := d.world.modelsOf(ns)
	if len(ms) == 0 {
		d.world.mu.Unlock()
		return false, nil
	}
	m := pick(d.rng, ms)
	as := d.world.adaptersOf(ns, m.name)
	d.world.mu.Unlock()
	for _, a := range as {
		if err := d.removeAdapter(ctx, a); err != nil {
			return true, err
		}
	}
	d.world.mu.Lock()
	delete(d.world.models, ns+"/"+m.name)
	d.world.mu.Unlock()
	err := d.retry(ctx, "delete Deployment "+m.name, func() error {
		return d.k8s.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name}},
			client.PropagationPolicy(metav1.DeletePropagationBackground))
	})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return true, err
}

func (d *driver) createAdapter(ctx context.Context, ns string) (bool, error) {
	d.world.mu.Lock()
	var candidates []*model
	for _, m := range d.world.modelsOf(ns) {
		if len(d.world.adaptersOf(ns, m.name)) < maxAdaptersPer {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		d.world.mu.Unlock()
		return false, nil
	}
	m := pick(d.rng, candidates)
	d.world.mu.Unlock()
	return d.createAdapterOn(ctx, m)
}

// createAdapterOn creates a ModelAdapter for the model, on all its pods or (one time in
// three) on one or two of them.
func (d *driver) createAdapterOn(ctx context.Context, m *model) (bool, error) {
	ns := m.ns
	d.world.mu.Lock()
	a := &adapter{ns: ns, model: m.name, name: d.name(m.name + "-a"), keyed: m.keyed}
	if d.rng.IntN(3) == 0 {
		a.replicas = 1 + d.rng.IntN(2)
	}
	a.artifact = "huggingface://soak/" + a.name + "-v1"
	d.world.adapters[ns+"/"+a.name] = a
	d.world.mu.Unlock()
	obj := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: ns},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   ptr.To(m.name),
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: m.name, v1alpha1.AdapterEnabledLabel: "true"}},
			ArtifactURL: a.artifact,
		},
	}
	if a.replicas > 0 {
		obj.Spec.Replicas = ptr.To(int32(a.replicas))
	}
	if a.keyed {
		obj.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: keySecret}
	}
	return true, d.create(ctx, obj)
}

func (d *driver) deleteAdapter(ctx context.Context, ns string) (bool, error) {
	d.world.mu.Lock()
	as := d.world.adaptersOf(ns, "")
	d.world.mu.Unlock()
	if len(as) == 0 {
		return false, nil
	}
	return true, d.removeAdapter(ctx, pick(d.rng, as))
}

// removeAdapter deletes a ModelAdapter and records when, for the deletion bound.
func (d *driver) removeAdapter(ctx context.Context, a *adapter) error {
	key := a.ns + "/" + a.name
	d.world.mu.Lock()
	delete(d.world.adapters, key)
	d.world.deleting[key] = deletion{key: key, at: time.Now(), step: d.step}
	d.world.mu.Unlock()
	d.report.Operations["adapter deletions (all causes)"]++
	err := d.retry(ctx, "delete ModelAdapter "+a.name, func() error {
		return d.k8s.Delete(ctx, &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: a.ns, Name: a.name}})
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (d *driver) newVersion(ctx context.Context, ns string) (bool, error) {
	d.world.mu.Lock()
	as := d.world.adaptersOf(ns, "")
	if len(as) == 0 {
		d.world.mu.Unlock()
		return false, nil
	}
	d.world.mu.Unlock()
	return true, d.bumpVersion(ctx, pick(d.rng, as))
}

// bumpVersion changes an adapter's artifactURL to its next version.
func (d *driver) bumpVersion(ctx context.Context, a *adapter) error {
	ns := a.ns
	d.world.mu.Lock()
	v := 2
	if i := strings.LastIndex(a.artifact, "-v"); i >= 0 {
		_, _ = fmt.Sscanf(a.artifact[i+2:], "%d", &v)
		v++
	}
	a.artifact = fmt.Sprintf("huggingface://soak/%s-v%d", a.name, v)
	artifact := a.artifact
	d.world.mu.Unlock()
	return d.retry(ctx, "new version of "+a.name, func() error {
		obj := &v1alpha1.ModelAdapter{}
		if err := d.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: a.name}, obj); err != nil {
			return err
		}
		patch := client.MergeFrom(obj.DeepCopy())
		obj.Spec.ArtifactURL = artifact
		return d.k8s.Patch(ctx, obj, patch)
	})
}

// setKey writes the namespace's API key Secret and, with rollout, the pod template of every
// keyed model: a key rotation (new pods start with the new key; old pods keep the old one
// until they are replaced).
func (d *driver) setKey(ctx context.Context, ns string, rollout bool) error {
	key := fmt.Sprintf("mp-soak-%s-%d", ns, d.rng.Uint64())
	d.world.mu.Lock()
	d.world.keys[ns] = key
	d.world.keyLog[ns] = append(d.world.keyLog[ns], key) // before any controller can read it
	var keyed []string
	for _, m := range d.world.modelsOf(ns) {
		if m.keyed {
			keyed = append(keyed, m.name)
		}
	}
	d.world.mu.Unlock()
	err := d.retry(ctx, "API key Secret", func() error {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: keySecret, Namespace: ns}}
		err := d.k8s.Get(ctx, client.ObjectKeyFromObject(s), s)
		if apierrors.IsNotFound(err) {
			s.StringData = map[string]string{"api-key": key}
			return d.k8s.Create(ctx, s)
		}
		if err != nil {
			return err
		}
		s.Data = map[string][]byte{"api-key": []byte(key)}
		return d.k8s.Update(ctx, s)
	})
	if err != nil || !rollout {
		return err
	}
	for _, name := range keyed {
		if err := d.patchDeployment(ctx, ns, name, func(dep *appsv1.Deployment) {
			if dep.Spec.Template.Annotations == nil {
				dep.Spec.Template.Annotations = map[string]string{}
			}
			dep.Spec.Template.Annotations[apiKeyAnnotation] = key
		}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// engines reads the fake engine's admin API.
func (d *driver) engines(ctx context.Context) (map[string]engineView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.o.engineAdmin+"/engines", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list []engineView
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	out := map[string]engineView{}
	for _, e := range list {
		out[e.Namespace+"/"+e.Pod] = e
	}
	return out, nil
}

// engineHistory reads every engine the fake engine has run, the stopped ones included (as
// they were when stopped), for the invariants over an engine's whole life.
func (d *driver) engineHistory(ctx context.Context) ([]engineView, error) {
	body, err := get(ctx, d.o.engineAdmin+"/engines?retired=true")
	if err != nil {
		return nil, err
	}
	var list []engineView
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		return nil, err
	}
	return list, nil
}

// engineCall posts to (or deletes at) the admin API of one engine. A pod gone meanwhile
// (404) is not an error: the fault or restart has nothing left to apply to.
func (d *driver) engineCall(ctx context.Context, method, key, what, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, d.o.engineAdmin+"/engines/"+key+"/"+what, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("engine admin %s %s/%s: %s: %s", method, key, what, resp.Status, b)
	}
	return nil
}

// enginesOf returns the engine keys (namespace/pod) of a random model that has engines.
func (d *driver) enginesOf(ctx context.Context) ([]string, error) {
	es, err := d.engines(ctx)
	if err != nil {
		return nil, err
	}
	byModel := map[string][]string{}
	d.world.mu.Lock()
	for _, m := range d.world.models {
		for key, e := range es {
			if e.Namespace == m.ns && strings.HasPrefix(e.Pod, m.name+"-") {
				byModel[m.ns+"/"+m.name] = append(byModel[m.ns+"/"+m.name], key)
			}
		}
	}
	d.world.mu.Unlock()
	if len(byModel) == 0 {
		return nil, nil
	}
	models := make([]string, 0, len(byModel))
	for k := range byModel {
		models = append(models, k)
	}
	slices.Sort(models)
	mk := pick(d.rng, models)
	keys := byModel[mk]
	slices.Sort(keys)
	d.world.mu.Lock()
	d.focus = d.world.models[mk]
	d.world.mu.Unlock()
	return keys, nil
}

// sh runs a hack/ script command line, returning its trimmed output.
func (d *driver) sh(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func (d *driver) stack(ctx context.Context, verb, name string, env ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(d.o.root, "hack", "stack.sh"), verb, name, d.o.stackDir)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("stack.sh %s %s: %w: %s", verb, name, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// leader returns which replica of a controller holds the lease (by its metrics), waiting up
// to 40 s for one to.
func (d *driver) leader(ctx context.Context, controller string) (string, error) {
	deadline := time.Now().Add(40 * time.Second)
	for {
		for _, r := range replicas[controller] {
			if body, err := get(ctx, metricsURL[r]); err == nil && leaderIn(body) {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no replica of %s reports leader_election_master_status 1", controller)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func leaderIn(body string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}

var localHTTP = &http.Client{Timeout: 5 * time.Second}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := localHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return string(b), nil
}

// proxyKubeconfig writes a kubeconfig that reaches the API server through the slow proxy as
// the controller's ServiceAccount (the proxy adds the admin credentials; the admin may
// impersonate).
func (d *driver) proxyKubeconfig(controller string) (string, error) {
	path := filepath.Join(d.o.stackDir, controller+".slow.kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: slow-proxy, cluster: {server: %q}}]
users: [{name: %[2]s, user: {as: "system:serviceaccount:loraplane-system:%[2]s"}}]
contexts: [{name: slow-proxy, context: {cluster: slow-proxy, user: %[2]s}}]
current-context: slow-proxy
`, d.proxy.URL, controller)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// focusedOp makes a change that needs the engines of the model the step's engine faults hit:
// an adapter created on it, a new version of one of its adapters, one of its adapters
// deleted, or the model scaled.
func (d *driver) focusedOp(ctx context.Context) error {
	d.world.mu.Lock()
	m := d.focus
	if m == nil || d.world.models[m.ns+"/"+m.name] != m {
		d.world.mu.Unlock()
		return nil
	}
	as := d.world.adaptersOf(m.ns, m.name)
	d.world.mu.Unlock()
	kinds := []string{"scale-model"}
	if len(as) < maxAdaptersPer {
		kinds = append(kinds, "create-adapter", "create-adapter")
	}
	if len(as) > 0 {
		kinds = append(kinds, "new-version", "new-version", "delete-adapter")
	}
	kind := pick(d.rng, kinds)
	var err error
	switch kind {
	case "scale-model":
		d.world.mu.Lock()
		n := m.replicas%4 + 1
		m.replicas = n
		d.world.mu.Unlock()
		err = d.patchDeployment(ctx, m.ns, m.name, func(dep *appsv1.Deployment) { dep.Spec.Replicas = ptr.To(int32(n)) })
	case "create-adapter":
		_, err = d.createAdapterOn(ctx, m)
	case "new-version":
		err = d.bumpVersion(ctx, pick(d.rng, as))
	case "delete-adapter":
		err = d.removeAdapter(ctx, pick(d.rng, as))
	}
	if err != nil {
		return fmt.Errorf("%s on %s/%s: %w", kind, m.ns, m.name, err)
	}
	d.report.Operations[kind+" (on faulted engines)"]++
	return nil
}
