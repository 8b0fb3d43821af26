package testenv

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// SlowProxy is a plain-HTTP reverse proxy to the API server that adds the admin identity and
// holds back the initial list of chosen collections. client-go fills informers with a
// streaming watch-list (watch=true&sendInitialEvents=true), so both that and a plain LIST are
// delayed; follow-up watches are not.
type SlowProxy struct {
	*httptest.Server
	delayed sync.Map // path -> time.Duration
	held    atomic.Int64
}

// NewSlowProxy starts a proxy to the API server of cfg. Close it when done.
func NewSlowProxy(cfg *rest.Config) (*SlowProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	p := &SlowProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     transport,
		FlushInterval: -1,
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := p.delayed.Load(r.URL.Path); ok && isInitialList(r) {
			p.held.Add(1)
			select {
			case <-time.After(d.(time.Duration)):
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	return p, nil
}

func isInitialList(r *http.Request) bool {
	q := r.URL.Query()
	return q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"
}

// Delay holds back the initial list of a collection path such as /api/v1/pods.
func (p *SlowProxy) Delay(path string, d time.Duration) { p.delayed.Store(path, d) }

// Held is how many initial lists the proxy has held back so far: a test checks that the
// delayed list was asked for before it claims what the client did meanwhile.
func (p *SlowProxy) Held() int64 { return p.held.Load() }

// Config is a client configuration that goes through the proxy.
func (p *SlowProxy) Config() *rest.Config { return &rest.Config{Host: p.URL} }
