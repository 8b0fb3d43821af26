package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Client loads, unloads and lists LoRA adapters on one engine pod.
// Implementations are safe for concurrent use. Every error is an *Error.
type Client interface {
	// Load loads the adapter. An adapter of that name already loaded counts
	// as success, unless req.Replace asks for its weights to be replaced.
	Load(ctx context.Context, ep Endpoint, req LoadRequest) error
	// Unload unloads the adapter. An adapter that is not loaded counts as
	// success.
	Unload(ctx context.Context, ep Endpoint, adapterName string) error
	// ListAdapters returns the LoRA adapters the engine serves, sorted by
	// name.
	ListAdapters(ctx context.Context, ep Endpoint) ([]Adapter, error)
}

// The clients of the engine kinds, one file each (vllm.go, sglang.go, runtime.go), all on
// the shared transport.
type (
	// vllmClient drives vLLM's runtime LoRA API.
	vllmClient struct{ t *transport }
	// sglangClient drives SGLang's LoRA API, which answers
	// {"success": bool, "error_message": string}: 200 on success, 400 on failure.
	sglangClient struct{ t *transport }
	// runtimeClient drives the AIBrix runtime sidecar, which downloads the artifact and
	// then asks its engine to load it, relaying the engine's answer.
	runtimeClient struct{ t *transport }
)

var _ = []Client{(*vllmClient)(nil), (*sglangClient)(nil), (*runtimeClient)(nil)}

// The LoRA API routes of each kind.
const (
	vllmLoadPath      = "/v1/load_lora_adapter"
	vllmUnloadPath    = "/v1/unload_lora_adapter"
	sglangLoadPath    = "/load_lora_adapter"
	sglangUnloadPath  = "/unload_lora_adapter"
	runtimeLoadPath   = "/v1/lora_adapter/load"
	runtimeUnloadPath = "/v1/lora_adapter/unload"
)

// Adapter is a LoRA adapter an engine lists.
type Adapter struct {
	// Name is the name the engine serves it under.
	Name string
	// Path is where the engine loaded it from (the "root" of its /v1/models
	// entry: the lora_path of the load call for vLLM and SGLang, a local
	// download directory behind the runtime sidecar); "" when not reported.
	Path string
}

// LoadRequest describes an adapter to load.
type LoadRequest struct {
	// Name is the name the engine serves the adapter under (lora_name).
	Name string
	// ArtifactURL is where the adapter is stored, as in the ModelAdapter
	// spec. For vLLM and SGLang it is mapped with ResolveArtifact; the
	// runtime sidecar receives it unchanged.
	ArtifactURL string
	// Credentials for fetching the artifact; sent only to the runtime
	// sidecar (vLLM and SGLang have no such parameter).
	Credentials map[string]string
	// AdditionalConfig is passed to the runtime sidecar as
	// additional_config; vLLM and SGLang have no such parameter.
	AdditionalConfig map[string]string
	// Replace asks the engine to replace the weights of an adapter of that
	// name that is already loaded (vLLM's load_inplace). Only KindVLLM
	// supports it; an engine that answers "already loaded" anyway fails
	// with ReasonReloadUnsupported, and the caller unloads and loads.
	Replace bool
}

// Observer is told about every HTTP request made: the engine kind, the
// operation (OpLoad, OpUnload, OpList), the code (the HTTP status as a string
// when the engine answered, otherwise CodeTimeout, CodeUnreachable or
// CodeCanceled) and how long the request took, body included.
type Observer func(engine, op, code string, d time.Duration)

// Defaults for Options.
const (
	DefaultTimeout             = 10 * time.Second
	DefaultLoadTimeout         = time.Minute
	DefaultMaxResponseBytes    = 1 << 20
	DefaultMaxIdleConnsPerHost = 4
	DefaultIdleConnTimeout     = 90 * time.Second
)

// maxResponseHeaderBytes bounds response headers on the default transport.
const maxResponseHeaderBytes = 64 << 10

const userAgent = "loraplane-adapter-controller"

// Options configure New. The zero value is valid.
type Options struct {
	// Timeout bounds each request, from dialling to the end of the body,
	// loads excepted. Default DefaultTimeout.
	Timeout time.Duration
	// LoadTimeout bounds each load request. An engine answers a load only
	// once the adapter is loaded, which for a large artifact (or a download
	// through the runtime sidecar) takes far longer than a listing. Default
	// DefaultLoadTimeout.
	LoadTimeout time.Duration
	// HTTPClient, when set, is used (a copy of it, which never follows
	// redirects) instead of the default one. Its transport should not use a
	// proxy: engines are addressed by pod IP. MaxIdleConnsPerHost and
	// IdleConnTimeout must then be left zero.
	HTTPClient *http.Client
	// MaxIdleConnsPerHost is the number of idle keep-alive connections kept
	// per engine pod by the default transport. Default
	// DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes idle connections of the default transport
	// after this long. Default DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
	// MaxResponseBytes is the largest response body accepted; larger ones
	// fail with ReasonEngineResponseTooLarge after reading at most one byte
	// more than this. Default DefaultMaxResponseBytes (1 MiB).
	MaxResponseBytes int64
	// Observer, if set, is called once per HTTP request, e.g. to record
	// metrics. It must be safe for concurrent use and return quickly.
	Observer Observer
	// Now is the clock used to measure request durations for Observer.
	// Default time.Now.
	Now func() time.Time
}

// HTTPClient drives every engine kind, choosing the implementation from
// Endpoint.Kind. Build it with New; it is safe for concurrent use.
type HTTPClient struct {
	http    *http.Client
	clients map[Kind]Client
}

var _ Client = (*HTTPClient)(nil)

// New returns an HTTPClient configured by opts.
func New(opts Options) (*HTTPClient, error) {
	switch {
	case opts.Timeout < 0 || opts.LoadTimeout < 0:
		return nil, fmt.Errorf("engine client: timeouts %v and %v must not be negative", opts.Timeout, opts.LoadTimeout)
	case opts.MaxResponseBytes < 0:
		return nil, fmt.Errorf("engine client: max response bytes %d is negative", opts.MaxResponseBytes)
	case opts.MaxIdleConnsPerHost < 0:
		return nil, fmt.Errorf("engine client: max idle connections per host %d is negative", opts.MaxIdleConnsPerHost)
	case opts.IdleConnTimeout < 0:
		return nil, fmt.Errorf("engine client: idle connection timeout %v is negative", opts.IdleConnTimeout)
	case opts.HTTPClient != nil && (opts.MaxIdleConnsPerHost != 0 || opts.IdleConnTimeout != 0):
		return nil, errors.New("engine client: MaxIdleConnsPerHost and IdleConnTimeout configure the default transport and cannot be combined with HTTPClient")
	}

	t := &transport{
		timeout:     opts.Timeout,
		loadTimeout: opts.LoadTimeout,
		maxBody:     opts.MaxResponseBytes,
		observe:     opts.Observer,
		now:         opts.Now,
	}
	if t.timeout == 0 {
		t.timeout = DefaultTimeout
	}
	if t.loadTimeout == 0 {
		t.loadTimeout = DefaultLoadTimeout
	}
	if t.maxBody == 0 {
		t.maxBody = DefaultMaxResponseBytes
	}
	if t.observe == nil {
		t.observe = func(string, string, string, time.Duration) {}
	}
	if t.now == nil {
		t.now = time.Now
	}

	if opts.HTTPClient != nil {
		hc := *opts.HTTPClient
		t.http = &hc
	} else {
		t.http = &http.Client{Transport: newTransport(t.timeout, opts.MaxIdleConnsPerHost, opts.IdleConnTimeout)}
	}
	t.http.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	return &HTTPClient{
		http: t.http,
		clients: map[Kind]Client{
			KindVLLM:    &vllmClient{t: t},
			KindSGLang:  &sglangClient{t: t},
			KindRuntime: &runtimeClient{t: t},
		},
	}, nil
}

// newTransport returns the default transport: keep-alive connections reused
// per pod, no proxy (pod IPs are dialled directly), bounded headers.
func newTransport(timeout time.Duration, maxIdlePerHost int, idleTimeout time.Duration) *http.Transport {
	if maxIdlePerHost == 0 {
		maxIdlePerHost = DefaultMaxIdleConnsPerHost
	}
	if idleTimeout == 0 {
		idleTimeout = DefaultIdleConnTimeout
	}
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		MaxIdleConnsPerHost:    maxIdlePerHost,
		IdleConnTimeout:        idleTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ExpectContinueTimeout:  time.Second,
	}
}

// For returns the implementation for kind ("" is KindVLLM).
func (c *HTTPClient) For(kind Kind) (Client, error) {
	if kind == "" {
		kind = KindVLLM
	}
	if impl, ok := c.clients[kind]; ok {
		return impl, nil
	}
	return nil, &Error{Reason: ReasonEngineUnsupported, Engine: kind, Message: fmt.Sprintf("unknown engine kind %q", string(kind))}
}

// Load loads an adapter through the implementation for ep.Kind.
func (c *HTTPClient) Load(ctx context.Context, ep Endpoint, req LoadRequest) error {
	impl, err := c.For(ep.Kind)
	if err != nil {
		return err
	}
	return impl.Load(ctx, ep, req)
}

// Unload unloads an adapter through the implementation for ep.Kind.
func (c *HTTPClient) Unload(ctx context.Context, ep Endpoint, adapterName string) error {
	impl, err := c.For(ep.Kind)
	if err != nil {
		return err
	}
	return impl.Unload(ctx, ep, adapterName)
}

// ListAdapters lists adapters through the implementation for ep.Kind.
func (c *HTTPClient) ListAdapters(ctx context.Context, ep Endpoint) ([]Adapter, error) {
	impl, err := c.For(ep.Kind)
	if err != nil {
		return nil, err
	}
	return impl.ListAdapters(ctx, ep)
}

// CloseIdleConnections closes idle keep-alive connections, e.g. on shutdown.
func (c *HTTPClient) CloseIdleConnections() { c.http.CloseIdleConnections() }

// transport performs one bounded HTTP exchange with an engine.
type transport struct {
	http        *http.Client
	timeout     time.Duration
	loadTimeout time.Duration
	maxBody     int64
	observe     Observer
	now         func() time.Time
}

// call is one request to an engine.
type call struct {
	engine Kind // reported in errors and to the Observer
	op     Op
	ep     Endpoint
	port   int
	method string
	path   string
	body   any // marshalled as JSON; nil sends no body
}

// reply is an engine's complete answer, of any status.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// message returns the engine's message from the body, API key redacted.
func (r *reply) message(ep Endpoint) string {
	return engineMessage(r.body, ep.APIKey)
}

func (r *reply) ok() bool { return r.status >= 200 && r.status < 300 }

// do sends c and reads the answer. It returns an error only when no complete
// answer was received (transport failure, timeout, oversized body); the
// caller interprets the status.
func (t *transport) do(ctx context.Context, c call) (*reply, error) {
	if err := c.ep.validate(c.op); err != nil {
		err.Engine = c.engine
		return nil, err
	}
	var payload io.Reader
	if c.body != nil {
		data, err := json.Marshal(c.body)
		if err != nil {
			return nil, &Error{Reason: ReasonInvalidRequest, Engine: c.engine, Op: c.op, Message: "cannot encode the request", Err: err}
		}
		payload = bytes.NewReader(data)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(c.ep.Host, strconv.Itoa(c.port)), Path: c.path}

	timeout := t.timeout
	if c.op == OpLoad {
		timeout = t.loadTimeout
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, c.method, u.String(), payload)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidEndpoint, Engine: c.engine, Op: c.op, Message: "cannot build the request", Err: err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.ep.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.ep.APIKey)
	}

	start := t.now()
	resp, err := t.http.Do(req)
	if err != nil {
		e := transportError(reqCtx, c.engine, c.op, err)
		t.observe(string(c.engine), string(c.op), observerCode(e), t.now().Sub(start))
		return nil, e
	}
	defer resp.Body.Close()

	body, rerr := t.readBody(reqCtx, c, resp)
	code := strconv.Itoa(resp.StatusCode)
	if rerr != nil && rerr.Reason != ReasonEngineResponseTooLarge {
		code = observerCode(rerr)
	}
	t.observe(string(c.engine), string(c.op), code, t.now().Sub(start))
	if rerr != nil {
		return nil, rerr
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// readBody reads at most maxBody+1 bytes, so that an oversized body is
// detected without buffering it. Closing the unread rest drops the
// connection instead of draining it.
func (t *transport) readBody(reqCtx context.Context, c call, resp *http.Response) ([]byte, *Error) {
	tooLarge := func() *Error {
		return &Error{
			Reason:  ReasonEngineResponseTooLarge,
			Engine:  c.engine,
			Op:      c.op,
			Status:  resp.StatusCode,
			Message: fmt.Sprintf("the response body is larger than %d bytes", t.maxBody),
		}
	}
	if resp.ContentLength > t.maxBody {
		return nil, tooLarge()
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, t.maxBody+1))
	if err != nil {
		return nil, transportError(reqCtx, c.engine, c.op, err)
	}
	if int64(len(body)) > t.maxBody {
		return nil, tooLarge()
	}
	return body, nil
}

// modelList is the answer of GET /v1/models (OpenAI format).
type modelList struct {
	Data *[]struct {
		ID     string  `json:"id"`
		Root   string  `json:"root"`
		Parent *string `json:"parent"`
	} `json:"data"`
}

// listModels asks the engine at ep.Host:port for its models and returns the
// LoRA adapters among them: the entries with a non-empty parent, with their
// root as the path.
func listModels(ctx context.Context, t *transport, engine Kind, ep Endpoint, port int) ([]Adapter, error) {
	r, err := t.do(ctx, call{engine: engine, op: OpList, ep: ep, port: port, method: http.MethodGet, path: "/v1/models"})
	if err != nil {
		return nil, err
	}
	if !r.ok() {
		return nil, statusError(engine, OpList, r.status, r.header, r.message(ep))
	}
	return parseModels(engine, r.status, r.body)
}

// parseModels reads the LoRA adapters from a /v1/models answer, sorted by name.
func parseModels(engine Kind, status int, body []byte) ([]Adapter, error) {
	var list modelList
	if err := json.Unmarshal(body, &list); err != nil {
		e := badResponse(engine, OpList, status, "the model list is not valid JSON")
		e.Err = err
		return nil, e
	}
	if list.Data == nil {
		return nil, badResponse(engine, OpList, status, `the model list has no "data" array`)
	}
	seen := make(map[string]bool, len(*list.Data))
	adapters := []Adapter{}
	for i, m := range *list.Data {
		if m.ID == "" {
			return nil, badResponse(engine, OpList, status, "model list entry %d has no id", i)
		}
		if m.Parent == nil || *m.Parent == "" || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		adapters = append(adapters, Adapter{Name: m.ID, Path: m.Root})
	}
	slices.SortFunc(adapters, func(a, b Adapter) int { return cmp.Compare(a.Name, b.Name) })
	return adapters, nil
}

// checkName rejects an empty adapter name before anything is sent.
// loadTarget checks the adapter name and resolves the artifact for the engine kind: the
// first steps of every Load. It returns what the engine is told to load.
func loadTarget(kind Kind, req LoadRequest) (string, error) {
	if err := checkName(kind, OpLoad, req.Name); err != nil {
		return "", err
	}
	target, err := ResolveArtifact(kind, req.ArtifactURL)
	if err != nil {
		return "", withOp(err, OpLoad)
	}
	return target, nil
}

// unload checks the adapter name, then posts the unload request: every Unload.
func (t *transport) unload(ctx context.Context, kind Kind, ep Endpoint, name, path string, body any) (*reply, error) {
	if err := checkName(kind, OpUnload, name); err != nil {
		return nil, err
	}
	return t.post(ctx, kind, OpUnload, ep, path, body)
}

// post sends a load or unload request to the API port of ep.
func (t *transport) post(ctx context.Context, kind Kind, op Op, ep Endpoint, path string, body any) (*reply, error) {
	return t.do(ctx, call{engine: kind, op: op, ep: ep, port: ep.port(), method: http.MethodPost, path: path, body: body})
}

func checkName(engine Kind, op Op, name string) error {
	if name == "" {
		return &Error{Reason: ReasonInvalidRequest, Engine: engine, Op: op, Message: "the adapter name is empty"}
	}
	return nil
}
