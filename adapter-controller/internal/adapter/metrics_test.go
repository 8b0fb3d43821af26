package adapter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/modelplane/modelplane/adapter-controller/internal/engine"
)

func TestRecorders(t *testing.T) {
	RegisterMetrics()
	if n := testutil.CollectAndCount(listRequests); n < 2 {
		t.Errorf("%d list request series after registration, want started and shared exposed at zero", n)
	}
	loads := testutil.ToFloat64(loadsTotal.WithLabelValues("vllm", string(ResultSuccess)))
	reloads := testutil.ToFloat64(reloadsTotal.WithLabelValues("vllm", string(ReloadInPlace), string(ResultSuccess)))
	failed := testutil.ToFloat64(reloadsTotal.WithLabelValues("sglang", string(ReloadUnloadLoad), string(engine.ReasonEngineRejected)))
	recordLoad(engine.KindVLLM, "", nil)
	recordLoad(engine.KindVLLM, ReloadInPlace, nil)
	recordLoad(engine.KindSGLang, ReloadUnloadLoad, &engine.Error{Reason: engine.ReasonEngineRejected})
	if got := testutil.ToFloat64(loadsTotal.WithLabelValues("vllm", string(ResultSuccess))) - loads; got != 2 {
		t.Errorf("vllm successful loads grew by %v, want 2 (a load and a reload)", got)
	}
	if got := testutil.ToFloat64(reloadsTotal.WithLabelValues("vllm", string(ReloadInPlace), string(ResultSuccess))) - reloads; got != 1 {
		t.Errorf("in-place reloads grew by %v, want 1", got)
	}
	if got := testutil.ToFloat64(reloadsTotal.WithLabelValues("sglang", string(ReloadUnloadLoad), string(engine.ReasonEngineRejected))) - failed; got != 1 {
		t.Errorf("failed sglang reloads grew by %v, want 1", got)
	}
	if got := resultOf(nil); got != ResultSuccess {
		t.Errorf("resultOf(nil) = %q, want success", got)
	}
	if got := resultOf(&engine.Error{Reason: engine.ReasonEngineTimeout}); got != "EngineTimeout" {
		t.Errorf("resultOf(timeout) = %q, want EngineTimeout", got)
	}
}
