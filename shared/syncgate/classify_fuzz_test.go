package syncgate

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzClassify: any API status (code, reason, message) → one of the four reasons, the same
// when wrapped, decided by the status's code and reason alone; a plain error's text never
// decides (it is always "other"). The seed corpus runs in every `go test`.
func FuzzClassify(f *testing.F) {
	f.Add(int32(403), string(metav1.StatusReasonForbidden), `pods is forbidden: User "x" cannot list resource "pods"`)
	f.Add(int32(401), string(metav1.StatusReasonUnauthorized), "Unauthorized")
	f.Add(int32(404), string(metav1.StatusReasonNotFound), "the server could not find the requested resource")
	f.Add(int32(503), string(metav1.StatusReasonServiceUnavailable), "connection refused")
	f.Add(int32(504), string(metav1.StatusReasonTimeout), "forbidden")
	f.Add(int32(500), string(metav1.StatusReasonInternalError), "dial tcp: connection refused; forbidden; not found")
	f.Add(int32(0), "", "")
	f.Add(int32(-1), "Forbidden", "\xff")
	known := map[Reason]bool{ReasonForbidden: true, ReasonNotFound: true, ReasonUnreachable: true, ReasonOther: true}
	f.Fuzz(func(t *testing.T, code int32, reason, message string) {
		if got := Classify(errors.New(message)); got != ReasonOther {
			t.Fatalf("plain error %q classified %q: text must not decide", message, got)
		}
		st := &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReason(reason), Message: message,
		}}
		got := Classify(st)
		if !known[got] {
			t.Fatalf("status %d %q classified %q", code, reason, got)
		}
		if wrapped := Classify(fmt.Errorf("listing pods: %w", st)); wrapped != got {
			t.Fatalf("wrapped %q, unwrapped %q", wrapped, got)
		}
		// The same code and reason with another message: the same class.
		other := &apierrors.StatusError{ErrStatus: st.ErrStatus}
		other.ErrStatus.Message = "x" + message + "forbidden connection refused not found"
		if again := Classify(other); again != got {
			t.Fatalf("message changed the class: %q vs %q", got, again)
		}
	})
}
