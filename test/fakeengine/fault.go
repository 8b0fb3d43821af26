package fakeengine

import (
	"fmt"
	"time"
)

// The operations a Fault applies to. The sidecar's load and unload are OpLoad and OpUnload.
const (
	OpAll    = ""
	OpLoad   = "load"
	OpUnload = "unload"
	OpList   = "list"
	// OpInfer is a completion or chat completion (/v1/completions, /v1/chat/completions):
	// not an operation a Fault applies to (SetFault refuses it), named for the counters.
	OpInfer = "infer"
)

// Fault changes how an engine answers an operation. The effects combine, in this order:
// Hang, then Status (or Lie, or the normal answer), then Stall, then Malformed, then HugeBody.
type Fault struct {
	// Op is the operation faulted: OpLoad, OpUnload, OpList, or OpAll for all three. A
	// fault for a specific operation takes precedence over an OpAll fault.
	Op string
	// Status, when non-zero, is answered instead of handling the request; the engine state
	// is not changed. Body is the answer's body (JSON Content-Type if it starts with '{'
	// or '[', else text/plain); an empty Body is replaced by the engine kind's usual error
	// body. Example: 404 with {"detail":"Not Found"} is vLLM without runtime LoRA updating.
	Status int
	Body   string
	// Hang delays the answer by this much, or until the client goes away or the engine is
	// closed (then the connection is dropped without an answer).
	Hang time.Duration
	// Stall handles the request (a load or unload takes effect) and then holds the answer
	// this long, or until the client goes away or the engine is closed (then the connection
	// is dropped without an answer): a client that dies meanwhile never learns that the
	// engine acted.
	Stall time.Duration
	// HugeBody prefixes the answer's body with this many bytes of whitespace: JSON answers
	// stay valid, so only a client that limits what it reads rejects them.
	HugeBody int
	// Malformed cuts the answer's body in half, which makes JSON bodies invalid.
	Malformed bool
	// Lie answers success without changing state: a load is not loaded, an unload does
	// not unload, a list shows only the base model.
	Lie bool
	// Times is how many requests the fault applies to; 0 means until ClearFault.
	Times int
}

// SetFault installs f, replacing any fault for the same Op. It panics on an unknown Op or a
// negative Times or HugeBody.
func (e *Engine) SetFault(f Fault) {
	switch f.Op {
	case OpAll, OpLoad, OpUnload, OpList:
	default:
		panic(fmt.Sprintf("fakeengine: unknown fault op %q", f.Op))
	}
	if f.Times < 0 || f.HugeBody < 0 {
		panic(fmt.Sprintf("fakeengine: invalid fault %+v", f))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.faults {
		if e.faults[i].Op == f.Op {
			e.faults[i] = f
			return
		}
	}
	e.faults = append(e.faults, f)
}

// ClearFault removes every fault.
func (e *Engine) ClearFault() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = nil
}

// takeFault returns the fault for op (the zero Fault if none) and uses up one of its Times.
func (e *Engine) takeFault(op string) Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := -1
	for j := range e.faults {
		if e.faults[j].Op == op {
			i = j
			break
		}
		if e.faults[j].Op == OpAll {
			i = j // keep looking for a specific one
		}
	}
	if i < 0 {
		return Fault{}
	}
	f := e.faults[i]
	if f.Times > 0 {
		e.faults[i].Times--
		if e.faults[i].Times == 0 {
			e.faults = append(e.faults[:i], e.faults[i+1:]...)
		}
	}
	return f
}
