// Package version holds the build version, set at link time with
// -ldflags "-X github.com/loraplane/loraplane/shared/version.Version=... -X .../version.Revision=...".
package version

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
)

var (
	// Version is the version of the running binary (a release tag such as v0.1.0, or what
	// git describe says of a development build).
	Version = "dev"
	// Revision is the commit the binary was built from. Without the link-time value it is
	// read from the build's VCS stamp (go build in a git checkout), else "unknown".
	Revision = ""
)

// Build describes the running binary.
type Build struct {
	Version, Revision, GoVersion string
}

// Get returns the version, revision and Go version of the running binary.
func Get() Build {
	return Build{Version: Version, Revision: cmp.Or(Revision, vcsRevision(), "unknown"), GoVersion: runtime.Version()}
}

// String renders the build as one line: "v0.1.0 (revision 0123abc, go1.26.8)".
func (b Build) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

// vcsRevision is the commit of the build's VCS stamp, with "-dirty" when the tree had
// uncommitted changes; "" without a stamp.
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}
