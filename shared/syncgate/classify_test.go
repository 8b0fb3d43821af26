package syncgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassify(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	tests := map[string]struct {
		err  error
		want Reason
	}{
		"nil":                   {nil, ""},
		"forbidden":             {apierrors.NewForbidden(pods, "", errors.New("RBAC: denied")), ReasonForbidden},
		"wrapped forbidden":     {fmt.Errorf("failed to list *v1.Pod: %w", apierrors.NewForbidden(pods, "", errors.New("no"))), ReasonForbidden},
		"unauthorized":          {apierrors.NewUnauthorized("bad token"), ReasonForbidden},
		"not found":             {apierrors.NewNotFound(pods, ""), ReasonNotFound},
		"no kind match":         {&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "x.io", Kind: "Widget"}}, ReasonNotFound},
		"connection refused":    {&url.Error{Op: "Get", URL: "https://127.0.0.1:1", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, ReasonUnreachable},
		"connection reset":      {fmt.Errorf("watch: %w", syscall.ECONNRESET), ReasonUnreachable},
		"unexpected EOF":        {fmt.Errorf("stream: %w", io.ErrUnexpectedEOF), ReasonUnreachable},
		"deadline":              {fmt.Errorf("list: %w", context.DeadlineExceeded), ReasonUnreachable},
		"server timeout":        {apierrors.NewServerTimeout(pods, "list", 1), ReasonUnreachable},
		"service unavailable":   {apierrors.NewServiceUnavailable("etcd down"), ReasonUnreachable},
		"dns":                   {&net.DNSError{Err: "no such host", Name: "api"}, ReasonUnreachable},
		"internal error":        {apierrors.NewInternalError(errors.New("boom")), ReasonOther},
		"too many requests":     {apierrors.NewTooManyRequests("slow down", 1), ReasonOther},
		"plain error":           {errors.New("decode failed"), ReasonOther},
		"text is not inspected": {errors.New("forbidden: connection refused"), ReasonOther},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestSyncErrorNamesEveryResource(t *testing.T) {
	err := &SyncError{Controller: "c", Timeout: 3e9, Pending: []PendingResource{
		{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Reason: ReasonForbidden, Err: errors.New("denied")},
		{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Reason: ReasonUnreachable, Err: errors.New("refused")},
	}}
	want := "caches of c did not sync within 3s: v1/Pod (forbidden: denied); apps/v1/Deployment (unreachable: refused)"
	if got := err.Error(); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
