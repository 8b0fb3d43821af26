package testenv

import (
	"os"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// KlogCapture collects what klog writes (the controllers' logger) while a test runs; the
// output still goes to stderr, so a failing test shows the log.
type KlogCapture struct {
	mu  sync.Mutex
	buf strings.Builder
}

// CaptureKlog sends klog's output to a new KlogCapture (and stderr) until the test ends.
func CaptureKlog(t *testing.T) *KlogCapture {
	t.Helper()
	c := &KlogCapture{}
	klog.LogToStderr(false)
	klog.SetOutput(c)
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	})
	return c
}

// Write implements io.Writer.
func (c *KlogCapture) Write(p []byte) (int, error) {
	_, _ = os.Stderr.Write(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

// Lines returns the lines captured so far that hold every one of parts.
func (c *KlogCapture) Lines(parts ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
next:
	for l := range strings.Lines(c.buf.String()) {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// Line returns the first captured line holding every one of parts, or "".
func (c *KlogCapture) Line(parts ...string) string {
	if l := c.Lines(parts...); len(l) > 0 {
		return l[0]
	}
	return ""
}
