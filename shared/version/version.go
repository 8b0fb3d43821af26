// Package version holds the build version, set at link time with
// -ldflags "-X github.com/loraplane/loraplane/shared/version.Version=...".
package version

// Version is the version of the running binary.
var Version = "dev"
