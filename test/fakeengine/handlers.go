package fakeengine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const maxRequestBody = 1 << 20

const (
	ctypeJSON = "application/json"
	ctypeText = "text/plain; charset=utf-8"
)

// reply is an answer before faults that alter bodies are applied.
type reply struct {
	status int
	ctype  string
	body   []byte
}

// errStyle is how an endpoint reports errors.
type errStyle int

const (
	styleVLLM   errStyle = iota // {"error":{"message","type","code"}}
	styleSGLang                 // {"success":false,"error_message"}
)

type route struct {
	method string
	op     string
	style  errStyle
	handle func(body []byte, lie bool) reply
}

func (e *Engine) engineRoutes() map[string]route {
	style := styleVLLM
	routes := map[string]route{}
	if e.opts.Kind == SGLang {
		style = styleSGLang
		routes["/load_lora_adapter"] = route{http.MethodPost, OpLoad, style, e.sglangLoad}
		routes["/unload_lora_adapter"] = route{http.MethodPost, OpUnload, style, e.sglangUnload}
	} else {
		routes["/v1/load_lora_adapter"] = route{http.MethodPost, OpLoad, style, e.vllmLoad}
		routes["/v1/unload_lora_adapter"] = route{http.MethodPost, OpUnload, style, e.vllmUnload}
	}
	routes["/v1/models"] = route{http.MethodGet, OpList, style, e.list}
	routes["/metrics"] = route{http.MethodGet, opMetrics, style, e.metrics}
	// Both engines serve the OpenAI-compatible inference API.
	routes["/v1/completions"] = route{http.MethodPost, OpInfer, styleVLLM, e.completion}
	routes["/v1/chat/completions"] = route{http.MethodPost, OpInfer, styleVLLM, e.chatCompletion}
	return routes
}

func (e *Engine) runtimeRoutes() map[string]route {
	return map[string]route{
		"/v1/lora_adapter/load":   {http.MethodPost, OpLoad, styleVLLM, e.runtimeLoad},
		"/v1/lora_adapter/unload": {http.MethodPost, OpUnload, styleVLLM, e.runtimeUnload},
	}
}

func (e *Engine) handle(w http.ResponseWriter, r *http.Request, routes map[string]route) {
	e.inFlight.Add(1)
	defer e.inFlight.Add(-1)
	ctx := r.Context()

	e.mu.Lock()
	e.counts.Requests[r.Method+" "+r.URL.Path]++
	if r.URL.Path != "/health" { // recorded before any wait: a request dropped still presented its key
		e.keysSeen[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")] = true
	}
	e.mu.Unlock()

	if !sleep(ctx, e.opts.Latency) {
		panic(http.ErrAbortHandler)
	}
	if r.URL.Path == "/health" {
		if r.Method != http.MethodGet {
			write(w, detail(http.StatusMethodNotAllowed, "Method Not Allowed"), 0)
			return
		}
		write(w, reply{http.StatusOK, ctypeText, nil}, 0)
		return
	}
	// Like vLLM's, the key guards the API, not /metrics.
	if e.opts.APIKey != "" && r.URL.Path != "/metrics" && r.Header.Get("Authorization") != "Bearer "+e.opts.APIKey {
		write(w, vllmError(http.StatusUnauthorized, "Unauthorized", "AuthenticationError"), 0)
		return
	}
	rt, ok := routes[r.URL.Path]
	if !ok {
		write(w, detail(http.StatusNotFound, "Not Found"), 0)
		return
	}
	if r.Method != rt.method {
		w.Header().Set("Allow", rt.method)
		write(w, detail(http.StatusMethodNotAllowed, "Method Not Allowed"), 0)
		return
	}

	e.mu.Lock()
	switch rt.op {
	case OpLoad:
		e.counts.Loads++
	case OpUnload:
		e.counts.Unloads++
	case OpList:
		e.counts.Lists++
	}
	e.mu.Unlock()

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		write(w, badRequest(rt.style, "could not read request body: "+err.Error()), 0)
		return
	}
	if rt.op == OpUnload {
		e.countForeignUnload(body)
	}

	var f Fault // faults are for the LoRA management API (OpAll: its three operations)
	if rt.op != OpInfer && rt.op != opMetrics {
		f = e.takeFault(rt.op)
	}
	if !sleep(ctx, f.Hang) {
		panic(http.ErrAbortHandler) // client gone or engine closed: drop the connection
	}
	if rt.op == OpLoad && !sleep(e.ctx, e.opts.LoadDelay) { // the client's leaving does not stop it
		panic(http.ErrAbortHandler)
	}
	var rep reply
	switch {
	case f.Status != 0:
		rep = reply{f.Status, ctypeText, []byte(f.Body)}
		if f.Body == "" {
			rep = injected(rt.style, f.Status)
		} else if f.Body[0] == '{' || f.Body[0] == '[' {
			rep.ctype = ctypeJSON
		}
	default:
		rep = rt.handle(body, f.Lie)
	}
	if !sleep(ctx, f.Stall) {
		panic(http.ErrAbortHandler)
	}
	if f.Malformed {
		rep.body = rep.body[:len(rep.body)/2]
	}
	if rt.op == OpInfer {
		w.Header().Set(ServedByHeader, e.opts.Name)
	}
	write(w, rep, f.HugeBody)
}

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// write sends rep with pad bytes of whitespace before its body.
func write(w http.ResponseWriter, rep reply, pad int) {
	h := w.Header()
	h.Set("Content-Type", rep.ctype)
	h.Set("Content-Length", strconv.Itoa(pad+len(rep.body)))
	w.WriteHeader(rep.status)
	if pad > 0 {
		chunk := bytes.Repeat([]byte{' '}, min(pad, 64<<10))
		for pad > 0 {
			n := min(pad, len(chunk))
			if _, err := w.Write(chunk[:n]); err != nil {
				return
			}
			pad -= n
		}
	}
	_, _ = w.Write(rep.body)
}

// marshal encodes v as JSON without HTML escaping, so names appear verbatim.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only fixed types are encoded
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func jsonReply(status int, v any) reply { return reply{status, ctypeJSON, marshal(v)} }

// okText is a 200 plain-text answer, as vLLM gives on success.
func okText(s string) reply { return reply{http.StatusOK, ctypeText, []byte(s)} }

// detail is FastAPI's own error body.
func detail(status int, msg string) reply {
	return jsonReply(status, map[string]string{"detail": msg})
}

type vllmErrorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func vllmError(status int, msg, typ string) reply {
	var b vllmErrorBody
	b.Error.Message, b.Error.Type, b.Error.Code = msg, typ, status
	return jsonReply(status, b)
}

type sglangResult struct {
	Success      bool   `json:"success"`
	ErrorMessage string `json:"error_message"`
}

func sglangReply(status int, errMsg string) reply {
	return jsonReply(status, sglangResult{Success: errMsg == "", ErrorMessage: errMsg})
}

func badRequest(style errStyle, msg string) reply {
	if style == styleSGLang {
		return sglangReply(http.StatusBadRequest, msg)
	}
	return vllmError(http.StatusBadRequest, msg, "BadRequestError")
}

// injected is the body of a Status fault without Body.
func injected(style errStyle, status int) reply {
	msg := "injected fault: " + http.StatusText(status)
	if style == styleSGLang {
		return reply{status, ctypeJSON, marshal(sglangResult{ErrorMessage: msg})}
	}
	return vllmError(status, msg, "InternalServerError")
}

// decode parses a JSON object request body into v.
func decode(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("request body is empty")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// loadResult is the outcome of a load.
type loadResult int

const (
	loadDone       loadResult = iota // added, or replaced in place
	loadExists                       // already loaded (and not replaced)
	loadAtCapacity                   // refused: an SGLang engine at its --max-loaded-loras
)

// load adds an adapter unless it is loaded (or, with replace, replaces its path), or an
// SGLang engine is full. A vLLM engine with a capacity evicts the least recently used
// adapter beyond it (it stays listed).
func (e *Engine) load(name, path string, replace, lie bool) loadResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.adapters[name]; ok {
		if !replace {
			return loadExists
		}
		if !lie {
			a.path = path
			e.adapters[name] = a
			e.use(name)
		}
		return loadDone
	}
	if lie {
		return loadDone
	}
	if e.full() {
		e.counts.CapacityRefusals++
		return loadAtCapacity
	}
	e.seq++
	e.adapters[name] = adapter{path: path, seq: e.seq}
	e.use(name)
	return loadDone
}

// countForeignUnload counts an unload request naming an adapter held from Options.Preload,
// before faults decide its outcome: the client tried to unload what it did not load. Every
// unload body (vLLM, SGLang, the sidecar) names the adapter in lora_name.
func (e *Engine) countForeignUnload(body []byte) {
	var req struct {
		LoraName string `json:"lora_name"`
	}
	if json.Unmarshal(body, &req) != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.adapters[req.LoraName]; ok && a.preloaded {
		e.counts.ForeignUnloads++
	}
}

// unload removes an adapter; it reports whether it was loaded.
func (e *Engine) unload(name string, lie bool) bool {
	if e.opts.OnUnload != nil {
		e.opts.OnUnload(name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.adapters[name]; !ok {
		return false
	}
	if !lie {
		delete(e.adapters, name)
		e.forget(name)
	}
	return true
}

type loadRequest struct {
	LoraName    string `json:"lora_name"`
	LoraPath    string `json:"lora_path"`
	LoadInplace bool   `json:"load_inplace"`
}

func (e *Engine) vllmLoad(body []byte, lie bool) reply {
	var req loadRequest
	if err := decode(body, &req); err != nil {
		return badRequest(styleVLLM, err.Error())
	}
	if req.LoraName == "" || req.LoraPath == "" {
		return badRequest(styleVLLM, "Both 'lora_name' and 'lora_path' must be provided.")
	}
	inPlace := req.LoadInplace && !e.opts.NoLoadInplace
	if e.load(req.LoraName, req.LoraPath, inPlace, lie) == loadExists {
		return badRequest(styleVLLM, fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.LoraName))
	}
	return okText(fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", req.LoraName))
}

func (e *Engine) vllmUnload(body []byte, lie bool) reply {
	return e.unloadVLLMStyle(body, lie, "removed")
}

// unloadVLLMStyle is the unload of vLLM and of the runtime sidecar, which relays vLLM's
// answers; done is the verb of the success message.
func (e *Engine) unloadVLLMStyle(body []byte, lie bool, done string) reply {
	var req runtimeUnloadRequest // vLLM's body is the same without cleanup_local
	if err := decode(body, &req); err != nil {
		return badRequest(styleVLLM, err.Error())
	}
	if req.LoraName == "" {
		return badRequest(styleVLLM, "'lora_name' needs to be provided to unload a LoRA adapter.")
	}
	if !e.unload(req.LoraName, lie) {
		return vllmError(http.StatusNotFound, fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoraName), "NotFoundError")
	}
	return okText(fmt.Sprintf("Success: LoRA adapter '%s' %s successfully.", req.LoraName, done))
}

func (e *Engine) sglangLoad(body []byte, lie bool) reply {
	var req loadRequest
	if err := decode(body, &req); err != nil {
		return badRequest(styleSGLang, err.Error())
	}
	if req.LoraName == "" || req.LoraPath == "" {
		return badRequest(styleSGLang, "lora_name and lora_path are required")
	}
	switch e.load(req.LoraName, req.LoraPath, false, lie) {
	case loadExists:
		return badRequest(styleSGLang, fmt.Sprintf("The LoRA adapter %s is already loaded", req.LoraName))
	case loadAtCapacity:
		return badRequest(styleSGLang, fmt.Sprintf("Cannot load LoRA adapter %s at path %s. Maximum number of loaded LoRA adapters is %d. "+
			"Please unload some LoRA adapters before loading new ones.", req.LoraName, req.LoraPath, e.opts.Capacity.MaxLoadedLoras))
	}
	return sglangReply(http.StatusOK, "")
}

func (e *Engine) sglangUnload(body []byte, lie bool) reply {
	var req loadRequest
	if err := decode(body, &req); err != nil {
		return badRequest(styleSGLang, err.Error())
	}
	if req.LoraName == "" {
		return badRequest(styleSGLang, "lora_name is required")
	}
	if !e.unload(req.LoraName, lie) {
		return badRequest(styleSGLang, fmt.Sprintf("LoRA adapter %s does not exist", req.LoraName))
	}
	return sglangReply(http.StatusOK, "")
}

type runtimeLoadRequest struct {
	LoraName         string          `json:"lora_name"`
	ArtifactURL      string          `json:"artifact_url"`
	Credentials      json.RawMessage `json:"credentials,omitempty"`
	AdditionalConfig json.RawMessage `json:"additional_config,omitempty"`
}

type runtimeUnloadRequest struct {
	LoraName     string `json:"lora_name"`
	CleanupLocal bool   `json:"cleanup_local"`
}

// runtimeLoad is the sidecar's load: the adapter's path is its artifact URL.
func (e *Engine) runtimeLoad(body []byte, lie bool) reply {
	var req runtimeLoadRequest
	if err := decode(body, &req); err != nil {
		return badRequest(styleVLLM, err.Error())
	}
	if req.LoraName == "" || req.ArtifactURL == "" {
		return badRequest(styleVLLM, "Both 'lora_name' and 'artifact_url' must be provided.")
	}
	if e.load(req.LoraName, req.ArtifactURL, false, lie) == loadExists {
		return badRequest(styleVLLM, fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.LoraName))
	}
	return okText(fmt.Sprintf("Success: LoRA adapter '%s' loaded successfully.", req.LoraName))
}

func (e *Engine) runtimeUnload(body []byte, lie bool) reply {
	return e.unloadVLLMStyle(body, lie, "unloaded")
}

type modelCard struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// list answers /v1/models: the base model, then the adapters in load order.
func (e *Engine) list(_ []byte, lie bool) reply {
	base := e.opts.BaseModel
	owner := string(e.opts.Kind)
	l := modelList{Object: "list", Data: []modelCard{{ID: base, Object: "model", Created: e.created, OwnedBy: owner, Root: base}}}
	if !lie {
		e.mu.Lock()
		type named struct {
			name string
			adapter
		}
		as := make([]named, 0, len(e.adapters))
		for n, a := range e.adapters {
			as = append(as, named{n, a})
		}
		e.mu.Unlock()
		slices.SortFunc(as, func(a, b named) int { return cmp.Compare(a.seq, b.seq) })
		for _, a := range as {
			l.Data = append(l.Data, modelCard{ID: a.name, Object: "model", Created: e.created, OwnedBy: owner, Root: a.path, Parent: &base})
		}
	}
	return jsonReply(http.StatusOK, l)
}

// ServedByHeader names the engine (Options.Name) that answered a completion.
const ServedByHeader = "X-Fake-Engine-Served-By"

type inferRequest struct {
	Model string `json:"model"`
}

// Completion is the answer to POST /v1/completions (and, with Object "chat.completion", to
// /v1/chat/completions): vLLM's fields, the generated text naming the model and the engine.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	// ServedBy is Options.Name of the engine that answered (also in ServedByHeader).
	ServedBy string `json:"served_by"`
}

// CompletionChoice is one choice: Text for completions, Message for chat completions.
type CompletionChoice struct {
	Index        int          `json:"index"`
	Text         string       `json:"text,omitempty"`
	Message      *ChatMessage `json:"message,omitempty"`
	FinishReason string       `json:"finish_reason"`
}

// ChatMessage is a chat completion's message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (e *Engine) completion(body []byte, _ bool) reply {
	return e.infer(body, "text_completion")
}

func (e *Engine) chatCompletion(body []byte, _ bool) reply {
	return e.infer(body, "chat.completion")
}

// infer answers a completion for the base model or a loaded adapter, as vLLM does: any other
// model is 404 NotFoundError ("The model `x` does not exist.").
func (e *Engine) infer(body []byte, object string) reply {
	var req inferRequest
	if err := decode(body, &req); err != nil {
		return badRequest(styleVLLM, err.Error())
	}
	if req.Model == "" {
		return badRequest(styleVLLM, "'model' must be provided.")
	}
	e.mu.Lock()
	_, loaded := e.adapters[req.Model]
	if loaded {
		e.served(req.Model)
	}
	e.recordLoRAInfo(req.Model, loaded)
	e.mu.Unlock()
	if req.Model != e.opts.BaseModel && !loaded {
		return vllmError(http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model), "NotFoundError")
	}
	text := fmt.Sprintf("%s served by %s", req.Model, e.opts.Name)
	c := Completion{ID: "cmpl-fake", Object: object, Created: time.Now().Unix(), Model: req.Model, ServedBy: e.opts.Name}
	ch := CompletionChoice{FinishReason: "length", Text: text}
	if object == "chat.completion" {
		ch = CompletionChoice{FinishReason: "stop", Message: &ChatMessage{Role: "assistant", Content: text}}
	}
	c.Choices = []CompletionChoice{ch}
	return jsonReply(http.StatusOK, c)
}
