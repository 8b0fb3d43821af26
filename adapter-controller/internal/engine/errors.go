package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
)

// Reason says why an engine operation failed. Values are PascalCase so they
// can be used unchanged as Kubernetes condition and event reasons.
type Reason string

const (
	// ReasonEngineUnreachable: no HTTP answer (connection refused or reset,
	// DNS failure, connection closed early).
	ReasonEngineUnreachable Reason = "EngineUnreachable"
	// ReasonEngineTimeout: the engine did not answer within the request
	// timeout, or answered 408.
	ReasonEngineTimeout Reason = "EngineTimeout"
	// ReasonEngineRequestCanceled: the caller's context was canceled.
	ReasonEngineRequestCanceled Reason = "EngineRequestCanceled"
	// ReasonEngineUnauthorized: the engine answered 401 or 403.
	ReasonEngineUnauthorized Reason = "EngineUnauthorized"
	// ReasonLoRAUpdatingDisabled: the engine has no runtime LoRA load route
	// (vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING): found by a load answered 404, or
	// before any load from the pod spec (PodSpec.Unfit).
	ReasonLoRAUpdatingDisabled Reason = "LoRAUpdatingDisabled"
	// ReasonEngineRejected: the engine refused the request (4xx, or SGLang
	// success=false).
	ReasonEngineRejected Reason = "EngineRejected"
	// ReasonEngineServerError: the engine answered 5xx.
	ReasonEngineServerError Reason = "EngineServerError"
	// ReasonEngineBadResponse: the answer could not be understood (malformed
	// or unexpected body, redirect, unexpected status).
	ReasonEngineBadResponse Reason = "EngineBadResponse"
	// ReasonEngineResponseTooLarge: the response body exceeded the limit.
	ReasonEngineResponseTooLarge Reason = "EngineResponseTooLarge"
	// ReasonArtifactNeedsRuntime: the artifact must be downloaded by the
	// aibrix-runtime sidecar, which the pod does not have.
	ReasonArtifactNeedsRuntime Reason = "ArtifactNeedsRuntime"
	// ReasonArtifactUnsupported: the artifact URL is empty, malformed or of a
	// scheme no engine understands.
	ReasonArtifactUnsupported Reason = "ArtifactUnsupported"
	// ReasonEngineUnsupported: the pod names an engine kind this package does
	// not drive.
	ReasonEngineUnsupported Reason = "EngineUnsupported"
	// ReasonInvalidEndpoint: the pod or endpoint cannot be addressed (no or
	// invalid pod IP, invalid port label, invalid API key characters).
	ReasonInvalidEndpoint Reason = "InvalidEndpoint"
	// ReasonInvalidRequest: the request itself is invalid (empty adapter name).
	ReasonInvalidRequest Reason = "InvalidRequest"
	// ReasonReloadUnsupported: a load with Replace was answered "already
	// loaded": the engine ignored the request to replace the weights (vLLM
	// before load_inplace). Unload and load instead.
	ReasonReloadUnsupported Reason = "ReloadUnsupported"
	// ReasonLoRADisabled: the pod's engine container runs without --enable-lora (SGLang:
	// nor --lora-paths), so it can take no adapter (PodSpec.Unfit).
	ReasonLoRADisabled Reason = "LoRADisabled"
	// ReasonLoRARankTooHigh: the adapter declares a rank above the engine's
	// --max-lora-rank (PodSpec.Unfit).
	ReasonLoRARankTooHigh Reason = "LoRARankTooHigh"
)

// Op names an engine operation; it is the "op" passed to the Observer.
type Op string

// Operations reported in errors and to the Observer.
const (
	OpLoad   Op = "load"
	OpUnload Op = "unload"
	OpList   Op = "list"
	// OpMetrics reads the engine's Prometheus metrics (ReadMetrics).
	OpMetrics Op = "metrics"
)

// Transport classes passed to the Observer as code when no HTTP status was
// received.
const (
	CodeTimeout     = "timeout"
	CodeUnreachable = "unreachable"
	CodeCanceled    = "canceled"
)

// Error is the error returned for every failure in this package.
type Error struct {
	// Reason classifies the failure.
	Reason Reason
	// Engine and Op say which call failed; empty when the failure is not
	// tied to a request (EndpointForPod, ResolveArtifact).
	Engine Kind
	Op     Op
	// Status is the HTTP status the engine answered, or 0 if none.
	Status int
	// Message is a human-readable explanation: the engine's own message when
	// it gave one (API key redacted), otherwise a description.
	Message string
	// Retryable reports whether repeating the same request may succeed
	// without any change to the adapter, the pod or the engine configuration.
	Retryable bool
	// Err is the underlying error, if any.
	Err error
}

// Error formats as "<engine> <op>: <Reason> (HTTP <status>): <message>: <cause>",
// leaving out the parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Engine != "" && e.Op != "":
		fmt.Fprintf(&b, "%s %s: ", e.Engine, e.Op)
	case e.Engine != "":
		fmt.Fprintf(&b, "%s: ", e.Engine)
	case e.Op != "":
		fmt.Fprintf(&b, "%s: ", e.Op)
	}
	b.WriteString(string(e.Reason))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// IsRetryable reports whether err (or an error it wraps) is an *Error marked
// retryable. It is false for nil and for errors not produced by this package.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// ReasonOf returns the Reason of the *Error in err's chain, or "" when there
// is none.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Unanswered reports whether err ended a request that may have reached the engine without
// its answer (a timeout, a cancellation, a connection cut after sending): the operation may
// still take effect on the engine. A refused or unroutable connection sent nothing.
func Unanswered(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Status != 0 {
		return false
	}
	switch e.Reason {
	case ReasonEngineTimeout, ReasonEngineRequestCanceled:
		return true
	case ReasonEngineUnreachable:
		for _, notSent := range []error{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN} {
			if errors.Is(e.Err, notSent) {
				return false
			}
		}
		return true
	}
	return false
}

// transportError classifies a failure to get (or finish reading) an HTTP
// answer. reqCtx is the per-request context: its state is authoritative,
// because a deadline that fired mid-dial may surface as any network error.
func transportError(reqCtx context.Context, engine Kind, op Op, err error) *Error {
	e := &Error{Engine: engine, Op: op, Retryable: true, Err: err}
	switch ctxErr := reqCtx.Err(); {
	case errors.Is(ctxErr, context.DeadlineExceeded) || isTimeout(err):
		e.Reason = ReasonEngineTimeout
		e.Message = "the engine did not answer in time"
	case ctxErr != nil || errors.Is(err, context.Canceled):
		e.Reason = ReasonEngineRequestCanceled
		e.Message = "the request was canceled"
	default:
		e.Reason = ReasonEngineUnreachable
		e.Message = unreachableMessage(err)
	}
	return e
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

func unreachableMessage(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTDOWN):
		return "no route to the engine"
	case errors.As(err, &dnsErr):
		return "name resolution failed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the engine closed the connection"
	default:
		return "cannot reach the engine"
	}
}

// observerCode is the Observer's code for a failure without an HTTP answer.
func observerCode(e *Error) string {
	switch e.Reason {
	case ReasonEngineTimeout:
		return CodeTimeout
	case ReasonEngineRequestCanceled:
		return CodeCanceled
	default:
		return CodeUnreachable
	}
}

// statusError classifies an HTTP answer that the operation did not accept.
// message is the engine's message (already redacted), possibly empty.
func statusError(engine Kind, op Op, status int, header http.Header, message string) *Error {
	e := &Error{Engine: engine, Op: op, Status: status, Message: message}
	switch {
	case status >= 300 && status < 400:
		e.Reason = ReasonEngineBadResponse
		e.Message = "the engine answered with a redirect, which is not followed"
		if loc := header.Get("Location"); loc != "" {
			e.Message += " (to " + redactURL(loc) + ")"
		}
		return e
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Reason = ReasonEngineUnauthorized
	case status == http.StatusRequestTimeout:
		e.Reason = ReasonEngineTimeout
		e.Retryable = true
	case status == http.StatusTooManyRequests:
		e.Reason = ReasonEngineRejected
		e.Retryable = true
	case status >= 400 && status < 500:
		e.Reason = ReasonEngineRejected
	case status >= 500 && status < 600:
		e.Reason = ReasonEngineServerError
		e.Retryable = true
	default:
		e.Reason = ReasonEngineBadResponse
		if e.Message == "" {
			e.Message = "unexpected HTTP status"
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// badResponse reports a successful status whose body cannot be understood.
func badResponse(engine Kind, op Op, status int, format string, args ...any) *Error {
	return &Error{
		Reason:  ReasonEngineBadResponse,
		Engine:  engine,
		Op:      op,
		Status:  status,
		Message: fmt.Sprintf(format, args...),
	}
}
