package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateReadyPod creates an engine pod (one container named "engine") and reports it Running
// and Ready on ip, as a kubelet would. mutate may change the pod before it is created.
func CreateReadyPod(ctx context.Context, c client.Client, namespace, name, ip string, labels map[string]string, mutate ...func(*corev1.Pod)) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "vllm"}}},
	}
	for _, m := range mutate {
		m(pod)
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating pod %s/%s: %w", namespace, name, err)
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("reporting pod %s/%s Ready: %w", namespace, name, err)
	}
	return pod, nil
}

// SetPodReady reports the pod Ready or not, as a kubelet would (the Ready condition's
// lastTransitionTime set to now when it changes).
func SetPodReady(ctx context.Context, c client.Client, pod *corev1.Pod, ready bool) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	conds := []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodReady {
			conds = append(conds, c)
		}
	}
	pod.Status.Conditions = conds
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("reporting pod %s/%s Ready=%s: %w", pod.Namespace, pod.Name, status, err)
	}
	return nil
}
