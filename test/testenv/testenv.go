// Package testenv starts envtest (a real kube-apiserver and etcd, built by `make tools`) with
// loraplane's CRDs, for integration tests of every module.
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running envtest control plane.
type Env struct {
	*envtest.Environment
	// Config is the admin configuration (system:masters).
	Config *rest.Config
	// stopLoopback stops the loopback EndpointSlice rewrite's webhook, where it runs.
	stopLoopback func()
}

// Stop stops the control plane and what the environment started beside it.
func (e *Env) Stop() error {
	if e.stopLoopback != nil {
		e.stopLoopback()
	}
	return e.Environment.Stop()
}

// Start starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS (set by the Makefile to
// bin/) with the ModelAdapter CRD from deploy/crds and the CRDs in extraCRDDirs installed.
func Start(extraCRDDirs ...string) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return StartWithCRDs(append([]string{filepath.Join(root, "deploy", "crds")}, extraCRDDirs...)...)
}

// StartWithCRDs starts the environment of Start with exactly the CRDs in crdDirs installed
// (e.g. AIBrix's ModelAdapter CRD in place of loraplane's: AIBrixCRDDir).
func StartWithCRDs(crdDirs ...string) (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with `make test` (it builds kube-apiserver and etcd into bin/), or use -short to skip integration tests")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%s not found in KUBEBUILDER_ASSETS=%s: run `make tools`", b, assets)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &Env{Environment: env, Config: cfg}
	if e.stopLoopback, err = installLoopbackRewrite(e, filepath.Join(root, loopbackPolicy)); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return e, nil
}

// Apply creates or updates the objects of a multi-document YAML file (server-side apply,
// so it may be repeated).
func (e *Env) Apply(path string) error {
	return e.ApplyInNamespace(context.Background(), path, "")
}

// AIBrixCRDDir is the directory of AIBrix's own ModelAdapter CRD (test/aibrixfixture/crd).
func AIBrixCRDDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "test", "aibrixfixture", "crd"), nil
}

// TestAddress is the address the test clusters' admission policy stores for a loopback pod
// IP: 127.0.X.Y becomes 198.18.X.Y (see hack/testing/loopback-endpointslices.yaml).
func TestAddress(podIP string) string {
	if rest, ok := strings.CutPrefix(podIP, "127."); ok {
		if _, xy, ok := strings.Cut(rest, "."); ok {
			return "198.18." + xy
		}
	}
	return podIP
}

// RepoRoot is the directory holding go.work, found from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

// ModuleDir is the directory of a module the calling module depends on (from the module
// cache), e.g. to install the Gateway API CRDs that ship in sigs.k8s.io/gateway-api.
func ModuleDir(module string) (string, error) {
	out, err := exec.CommandContext(context.Background(), "go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("go list -m %s: %w: %s", module, err, exitErr.Stderr)
		}
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not in the module cache", module)
	}
	return dir, nil
}

// GatewayAPIVersionEnv names the Gateway API release whose CRDs GatewayAPICRDDir returns
// (make test-compat sets it, e.g. v1.1.0); unset, they are those of the sigs.k8s.io/gateway-api
// module the calling module builds with.
const GatewayAPIVersionEnv = "TEST_GATEWAY_API_VERSION"

// GatewayAPICRDDir is the directory of the Gateway API standard channel CRDs the integration
// tests install: from the gateway-api module of $TEST_GATEWAY_API_VERSION (downloaded into the
// module cache from the module proxy), else of the calling module's own gateway-api version.
func GatewayAPICRDDir() (string, error) {
	dir, err := gatewayAPIModuleDir(os.Getenv(GatewayAPIVersionEnv))
	if err != nil {
		return "", err
	}
	crds := filepath.Join(dir, "config", "crd", "standard")
	if _, err := os.Stat(crds); err != nil {
		return "", fmt.Errorf("the Gateway API module at %s has no standard channel CRDs: %w", dir, err)
	}
	return crds, nil
}

func gatewayAPIModuleDir(version string) (string, error) {
	const module = "sigs.k8s.io/gateway-api"
	if version == "" {
		return ModuleDir(module)
	}
	cmd := exec.CommandContext(context.Background(), "go", "mod", "download", "-json", module+"@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Dir = os.TempDir() // outside any module: the download adds nothing to a go.mod
	out, err := cmd.Output()
	var dl struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &dl); jerr != nil || dl.Error != "" || err != nil {
		return "", fmt.Errorf("go mod download %s@%s (%s): %s: %w", module, version, GatewayAPIVersionEnv, dl.Error, errors.Join(err, jerr))
	}
	return dl.Dir, nil
}
