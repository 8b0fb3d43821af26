// Package version holds the build version, set at link time with
// -ldflags "-X github.com/modelplane/modelplane/shared/version.Version=...".
package version

// Version is the version of the running binary.
var Version = "dev"
