// Package cleanup deletes every ModelAdapter and waits until the adapter-controller has
// released their finalizers, i.e. unloaded them from the engines. An uninstall runs it while
// the controller still runs (the Helm chart's pre-delete hook, `adapter-controller
// --delete-all-adapters`): removing the controller or the CRD first would leave adapters
// loaded on engines and objects stuck with a finalizer nobody releases.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// What the cleanup does with ModelAdapters, and nothing else (its own Role in the chart).
// +kubebuilder:rbac:groups=model.aibrix.ai,resources=modeladapters,verbs=list;delete

// Options say where to delete and how long to wait.
type Options struct {
	// Namespaces to clean; empty means every namespace.
	Namespaces []string
	// Timeout bounds the wait for the finalizers to be released.
	Timeout time.Duration
	// Poll is the interval between checks (default 1s).
	Poll time.Duration
}

// Run deletes every ModelAdapter in the namespaces and waits until none is left. It fails
// naming the adapters still present (and their finalizers) when the timeout passes first.
func Run(ctx context.Context, c client.Client, o Options) error {
	if o.Timeout <= 0 {
		return fmt.Errorf("cleanup timeout must be positive, got %s", o.Timeout)
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	logger := klog.FromContext(ctx)
	adapters, err := list(ctx, c, o.Namespaces)
	if err != nil {
		return err
	}
	// Say what will be unloaded before anything is: one line per adapter with the pods that
	// hold it, then the total.
	for i := range adapters {
		a := &adapters[i]
		logger.Info("Will unload and delete ModelAdapter", "adapter", klog.KObj(a), "instances", a.Status.Instances,
			"alreadyDeleting", a.DeletionTimestamp != nil)
	}
	logger.Info("Deleting ModelAdapters", "count", len(adapters), "namespaces", scope(o.Namespaces))
	var errs []error
	for i := range adapters {
		a := &adapters[i]
		if a.DeletionTimestamp != nil {
			continue
		}
		if err := c.Delete(ctx, a); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting ModelAdapter %s: %w", klog.KObj(a), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	var left []v1alpha1.ModelAdapter
	err = wait.PollUntilContextTimeout(ctx, o.Poll, o.Timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if left, err = list(ctx, c, o.Namespaces); err != nil {
			logger.Info("Listing ModelAdapters failed; retrying", "err", err)
			return false, nil
		}
		if len(left) > 0 {
			logger.V(2).Info("Waiting for ModelAdapter finalizers", "left", len(left))
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting %s for ModelAdapters to be finalized (is the adapter-controller running?): %d left: %s: %w",
			o.Timeout, len(left), describe(left), err)
	}
	logger.Info("Every ModelAdapter is gone", "deleted", len(adapters))
	return nil
}

// list returns the ModelAdapters of the namespaces (all when none are named).
func list(ctx context.Context, c client.Client, namespaces []string) ([]v1alpha1.ModelAdapter, error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var out []v1alpha1.ModelAdapter
	for _, ns := range namespaces {
		var l v1alpha1.ModelAdapterList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing ModelAdapters in %s: %w", scope([]string{ns}), err)
		}
		out = append(out, l.Items...)
	}
	return out, nil
}

// describe names each adapter with its finalizers, sorted.
func describe(adapters []v1alpha1.ModelAdapter) string {
	out := make([]string, 0, len(adapters))
	for i := range adapters {
		a := &adapters[i]
		out = append(out, fmt.Sprintf("%s/%s (finalizers %v)", a.Namespace, a.Name, a.Finalizers))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func scope(namespaces []string) string {
	if len(namespaces) == 0 || namespaces[0] == metav1.NamespaceAll {
		return "all namespaces"
	}
	return strings.Join(namespaces, ",")
}
