package syncgate

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// Reason classifies why a resource could not be listed or watched.
type Reason string

// The causes a failed sync is reported with.
const (
	// ReasonForbidden: the API server refused the request (RBAC or authentication).
	ReasonForbidden Reason = "forbidden"
	// ReasonNotFound: the API is not served (CRD missing or removed).
	ReasonNotFound Reason = "not-found"
	// ReasonUnreachable: the API server could not be reached or did not answer in time.
	ReasonUnreachable Reason = "unreachable"
	// ReasonOther: anything else.
	ReasonOther Reason = "other"
	// ReasonSlowHandler: the informer had synced, but a controller's event handler had not
	// received every object of its initial list in time (a slow mapping function or
	// predicate). Classify never returns it: it names a delivery that timed out, not an error.
	ReasonSlowHandler Reason = "slow-handler"
)

// Classify returns the cause of a list/watch or discovery error. It looks only at typed
// errors (API status, network and context errors), never at message text.
func Classify(err error) Reason {
	switch {
	case err == nil:
		return ""
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return ReasonForbidden
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return ReasonNotFound
	case isUnreachable(err):
		return ReasonUnreachable
	default:
		return ReasonOther
	}
}

func isUnreachable(err error) bool {
	if apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) {
		return true
	}
	for _, target := range []error{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EHOSTUNREACH,
		syscall.ENETUNREACH, syscall.ETIMEDOUT, syscall.EPIPE,
		io.EOF, io.ErrUnexpectedEOF, context.DeadlineExceeded, net.ErrClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error // *net.DNSError and *net.OpError among them
	return errors.As(err, &netErr)
}
