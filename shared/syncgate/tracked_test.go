package syncgate

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/loraplane/loraplane/shared/metrics"
)

// TestWatchErrorCounting: a list or watch that ends with 410 Gone (the informer relists) is
// neither a watch error nor the resource's last error; any other failure counts as a watch
// error by reason and is remembered.
func TestWatchErrorCounting(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "test.loraplane.io", Version: "v1", Kind: "WatchCounting"}
	tr := &tracked{gvk: gvk, labels: metrics.ResourceLabels{Controller: "watch-counting-test", GVK: gvk}}
	errs := func(reason Reason) float64 {
		return testutil.ToFloat64(metrics.CacheWatchErrors.WithLabelValues(append(tr.labels.Values(), string(reason))...))
	}
	r := toolscache.NewReflector(&toolscache.ListWatch{}, nil, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)

	tr.onWatchError(context.Background(), r, apierrors.NewResourceExpired("too old resource version: 3237 (3276)"))
	tr.onWatchError(context.Background(), r, fmt.Errorf("watch: %w", apierrors.NewResourceExpired("The resourceVersion for the provided watch is too old.")))
	if got := errs(ReasonOther); got != 0 {
		t.Errorf("watch errors (other) after two expired watches = %v, want 0", got)
	}
	if tr.lastError() != nil {
		t.Errorf("last error after expired watches = %v, want none", tr.lastError())
	}

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	tr.onWatchError(context.Background(), r, forbidden)
	if got := errs(ReasonForbidden); got != 1 {
		t.Errorf("watch errors (forbidden) = %v, want 1", got)
	}
	if !errors.Is(tr.lastError(), forbidden) {
		t.Errorf("last error = %v, want the forbidden one", tr.lastError())
	}
}
