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
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatusError(t *testing.T) {
	cases := []struct {
		status        int
		wantReason    Reason
		wantRetryable bool
	}{
		{301, ReasonEngineBadResponse, false},
		{302, ReasonEngineBadResponse, false},
		{307, ReasonEngineBadResponse, false},
		{400, ReasonEngineRejected, false},
		{401, ReasonEngineUnauthorized, false},
		{403, ReasonEngineUnauthorized, false},
		{404, ReasonEngineRejected, false},
		{408, ReasonEngineTimeout, true},
		{409, ReasonEngineRejected, false},
		{422, ReasonEngineRejected, false},
		{429, ReasonEngineRejected, true},
		{500, ReasonEngineServerError, true},
		{502, ReasonEngineServerError, true},
		{503, ReasonEngineServerError, true},
		{504, ReasonEngineServerError, true},
		{204, ReasonEngineBadResponse, false},
		{600, ReasonEngineBadResponse, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			e := statusError(KindVLLM, OpLoad, tc.status, http.Header{}, "")
			got := errView{Reason: e.Reason, Status: e.Status, Retryable: e.Retryable}
			want := errView{Reason: tc.wantReason, Status: tc.status, Retryable: tc.wantRetryable}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("statusError(%d) mismatch (-want +got):\n%s", tc.status, diff)
			}
			if e.Message == "" {
				t.Errorf("statusError(%d) has an empty message", tc.status)
			}
		})
	}
}

// timeoutErr is a net.Error that reports a timeout.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTransportError(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	<-expired.Done()

	cases := map[string]struct {
		ctx         context.Context
		err         error
		want        errView
		wantObsCode string
	}{
		"refused":       {err: opErr(syscall.ECONNREFUSED), want: errView{Reason: ReasonEngineUnreachable, Message: "connection refused", Retryable: true}, wantObsCode: CodeUnreachable},
		"reset":         {err: opErr(syscall.ECONNRESET), want: errView{Reason: ReasonEngineUnreachable, Message: "connection reset", Retryable: true}, wantObsCode: CodeUnreachable},
		"broken pipe":   {err: opErr(syscall.EPIPE), want: errView{Reason: ReasonEngineUnreachable, Message: "connection reset", Retryable: true}, wantObsCode: CodeUnreachable},
		"no route":      {err: opErr(syscall.EHOSTUNREACH), want: errView{Reason: ReasonEngineUnreachable, Message: "no route to the engine", Retryable: true}, wantObsCode: CodeUnreachable},
		"DNS":           {err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, want: errView{Reason: ReasonEngineUnreachable, Message: "name resolution failed", Retryable: true}, wantObsCode: CodeUnreachable},
		"DNS timeout":   {err: &net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}, want: errView{Reason: ReasonEngineTimeout, Message: "the engine did not answer in time", Retryable: true}, wantObsCode: CodeTimeout},
		"EOF":           {err: fmt.Errorf("reading: %w", io.EOF), want: errView{Reason: ReasonEngineUnreachable, Message: "the engine closed the connection", Retryable: true}, wantObsCode: CodeUnreachable},
		"unexpected":    {err: io.ErrUnexpectedEOF, want: errView{Reason: ReasonEngineUnreachable, Message: "the engine closed the connection", Retryable: true}, wantObsCode: CodeUnreachable},
		"net timeout":   {err: timeoutErr{}, want: errView{Reason: ReasonEngineTimeout, Message: "the engine did not answer in time", Retryable: true}, wantObsCode: CodeTimeout},
		"deadline":      {err: context.DeadlineExceeded, want: errView{Reason: ReasonEngineTimeout, Message: "the engine did not answer in time", Retryable: true}, wantObsCode: CodeTimeout},
		"ctx expired":   {ctx: expired, err: opErr(syscall.ECONNRESET), want: errView{Reason: ReasonEngineTimeout, Message: "the engine did not answer in time", Retryable: true}, wantObsCode: CodeTimeout},
		"ctx canceled":  {ctx: canceled, err: errors.New("whatever"), want: errView{Reason: ReasonEngineRequestCanceled, Message: "the request was canceled", Retryable: true}, wantObsCode: CodeCanceled},
		"canceled err":  {err: context.Canceled, want: errView{Reason: ReasonEngineRequestCanceled, Message: "the request was canceled", Retryable: true}, wantObsCode: CodeCanceled},
		"other failure": {err: errors.New("tls: bad record"), want: errView{Reason: ReasonEngineUnreachable, Message: "cannot reach the engine", Retryable: true}, wantObsCode: CodeUnreachable},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			e := transportError(ctx, KindVLLM, OpList, tc.err)
			if diff := cmp.Diff(tc.want, errView{Reason: e.Reason, Status: e.Status, Message: e.Message, Retryable: e.Retryable}); diff != "" {
				t.Errorf("transportError() mismatch (-want +got):\n%s", diff)
			}
			if !errors.Is(e, tc.err) {
				t.Errorf("errors.Is(%v, %v) = false: the cause is not wrapped", e, tc.err)
			}
			if got := observerCode(e); got != tc.wantObsCode {
				t.Errorf("observerCode() = %q, want %q", got, tc.wantObsCode)
			}
		})
	}
}

func TestIsRetryableAndReasonOf(t *testing.T) {
	retryable := &Error{Reason: ReasonEngineServerError, Status: 503, Retryable: true}
	final := &Error{Reason: ReasonLoRAUpdatingDisabled, Status: 404}
	cases := map[string]struct {
		err           error
		wantRetryable bool
		wantReason    Reason
	}{
		"nil":                 {err: nil},
		"foreign error":       {err: errors.New("boom")},
		"retryable":           {err: retryable, wantRetryable: true, wantReason: ReasonEngineServerError},
		"not retryable":       {err: final, wantReason: ReasonLoRAUpdatingDisabled},
		"wrapped retryable":   {err: fmt.Errorf("loading on pod ns/p: %w", retryable), wantRetryable: true, wantReason: ReasonEngineServerError},
		"wrapped, joined too": {err: errors.Join(errors.New("x"), fmt.Errorf("y: %w", final)), wantReason: ReasonLoRAUpdatingDisabled},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsRetryable(tc.err); got != tc.wantRetryable {
				t.Errorf("IsRetryable() = %v, want %v", got, tc.wantRetryable)
			}
			if got := ReasonOf(tc.err); got != tc.wantReason {
				t.Errorf("ReasonOf() = %q, want %q", got, tc.wantReason)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	cause := errors.New("dial tcp 127.0.40.7:8000: connect: connection refused")
	cases := map[string]struct {
		err  *Error
		want string
	}{
		"full": {
			err:  &Error{Reason: ReasonEngineRejected, Engine: KindVLLM, Op: OpLoad, Status: 400, Message: "bad rank"},
			want: "vllm load: EngineRejected (HTTP 400): bad rank",
		},
		"with cause": {
			err:  &Error{Reason: ReasonEngineUnreachable, Engine: KindSGLang, Op: OpList, Message: "connection refused", Err: cause},
			want: "sglang list: EngineUnreachable: connection refused: " + cause.Error(),
		},
		"no request": {
			err:  &Error{Reason: ReasonInvalidEndpoint, Message: "no pod given"},
			want: "InvalidEndpoint: no pod given",
		},
		"engine only": {
			err:  &Error{Reason: ReasonArtifactNeedsRuntime, Engine: KindVLLM, Message: "m"},
			want: "vllm: ArtifactNeedsRuntime: m",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEngineMessage(t *testing.T) {
	cases := map[string]struct {
		body, key, want string
	}{
		"nested error":          {body: `{"error":{"message":"bad","type":"BadRequestError","code":400}}`, want: "bad"},
		"error string":          {body: `{"error":"Unauthorized"}`, want: "Unauthorized"},
		"flat message":          {body: `{"object":"error","message":"flat","code":400}`, want: "flat"},
		"sglang error_message":  {body: `{"success":false,"error_message":"sg"}`, want: "sg"},
		"detail string":         {body: `{"detail":"Not Found"}`, want: "Not Found"},
		"detail list":           {body: `{"detail":[{"msg":"a"},{"msg":"b"}]}`, want: "a; b"},
		"error object, no text": {body: `{"error":{"code":500},"message":"fallback"}`, want: "fallback"},
		"JSON without message":  {body: `{"foo":1}`, want: `{"foo":1}`},
		"plain text":            {body: "  Internal Server Error\n", want: "Internal Server Error"},
		"empty":                 {body: "", want: ""},
		"invalid UTF-8":         {body: "bad \xff byte", want: "bad \uFFFD byte"},
		"long text":             {body: strings.Repeat("é", 400), want: strings.Repeat("é", maxMessageBytes/2) + "…"},
		"key redacted":          {body: `{"error":{"message":"Invalid API key sk-123"}}`, key: "sk-123", want: "Invalid API key <redacted>"},
		"key redacted in text":  {body: "token sk-123 rejected", key: "sk-123", want: "token <redacted> rejected"},
		"key redacted before truncation": {
			body: strings.Repeat("a", maxMessageBytes-3) + "sk-123", key: "sk-123",
			want: strings.Repeat("a", maxMessageBytes-3) + "<re…",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, engineMessage([]byte(tc.body), tc.key)); diff != "" {
				t.Errorf("engineMessage() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMessageMatchers(t *testing.T) {
	cases := []struct {
		msg                       string
		wantLoaded, wantNotLoaded bool
	}{
		{msg: "The lora adapter 'a' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", wantLoaded: true},
		{msg: "LoRA with name a already exists. Loaded LoRAs: dict_keys(['a'])", wantLoaded: true},
		{msg: "LoRA adapter a is already loaded", wantLoaded: true},
		{msg: "The lora adapter 'a' cannot be found.", wantNotLoaded: true},
		{msg: "LoRA adapter a does not exist", wantNotLoaded: true},
		{msg: "LoRA with name a does not exist. Loaded LoRAs: dict_keys([])", wantNotLoaded: true},
		{msg: "Loading lora a failed: rank too large"},
		{msg: "No adapter found for /models/a", wantNotLoaded: false},
		{msg: ""},
	}
	for _, tc := range cases {
		if got := alreadyLoaded(tc.msg); got != tc.wantLoaded {
			t.Errorf("alreadyLoaded(%q) = %v, want %v", tc.msg, got, tc.wantLoaded)
		}
		if got := unknownAdapter(tc.msg); got != tc.wantNotLoaded {
			t.Errorf("unknownAdapter(%q) = %v, want %v", tc.msg, got, tc.wantNotLoaded)
		}
	}
}
