package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	old, oldRev := Version, Revision
	t.Cleanup(func() { Version, Revision = old, oldRev })

	Version, Revision = "v0.1.0", "0123abc"
	b := Get()
	if b.Version != "v0.1.0" || b.Revision != "0123abc" || b.GoVersion != runtime.Version() {
		t.Errorf("Get() = %+v", b)
	}
	if got, want := b.String(), "v0.1.0 (revision 0123abc, "+runtime.Version()+")"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	// Without a link-time revision: the VCS stamp of the test binary, or "unknown".
	Revision = ""
	if r := Get().Revision; r == "" || strings.ContainsAny(r, " \n") {
		t.Errorf("revision without a link-time value = %q", r)
	}
}
