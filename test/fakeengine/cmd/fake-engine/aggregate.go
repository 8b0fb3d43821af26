package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// aggregate serves on --admin-address the admin API over the in-pod admin APIs (the fake
// engine image with --serve-pod --pod-admin-address) of the pods matching --label-selector:
// GET /engines joins every pod's list; the per-engine calls go to that pod. On kind this is
// what the host-mode process is on kwok, so the e2e suite inspects and faults engines the
// same way on both.
func aggregate(ctx context.Context, o options) error {
	if o.podAdminPort <= 0 || o.podAdminPort > 65535 {
		return fmt.Errorf("--pod-admin-port %d is not a port", o.podAdminPort)
	}
	_, client, err := podClient(o)
	if err != nil {
		return err
	}
	a := &aggregator{client: client, namespace: o.namespace, selector: o.labelSelector, port: o.podAdminPort,
		http: &http.Client{Timeout: 10 * time.Second}}
	return serveAdmin(ctx, o.adminAddress, a.handler())
}

type aggregator struct {
	client    kubernetes.Interface
	namespace string // "" for all
	selector  string
	port      int
	http      *http.Client
}

func (a *aggregator) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /engines", a.list)
	mux.HandleFunc("/engines/{namespace}/{pod}/{op}", a.forward)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func (a *aggregator) podURL(p *corev1.Pod, path string) string {
	return "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(a.port)) + path
}

// list joins the engine lists of the running pods; a pod whose admin API does not answer
// (its container still starting) is left out, as the host-mode process leaves out a pod it
// does not serve yet.
func (a *aggregator) list(w http.ResponseWriter, req *http.Request) {
	pods, err := a.client.CoreV1().Pods(a.namespace).List(req.Context(), metav1.ListOptions{LabelSelector: a.selector})
	if err != nil {
		writeError(w, http.StatusBadGateway, "listing pods: "+err.Error())
		return
	}
	type entry struct {
		key  string
		view json.RawMessage
	}
	var (
		mu      sync.Mutex
		entries []entry
		wg      sync.WaitGroup
	)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		wg.Go(func() {
			var views []json.RawMessage
			if err := a.getJSON(req.Context(), a.podURL(p, "/engines"), &views); err != nil {
				klog.V(2).InfoS("Pod admin API not answering", "pod", klog.KObj(p), "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range views {
				entries = append(entries, entry{key: p.Namespace + "/" + p.Name, view: v})
			}
		})
	}
	wg.Wait()
	slices.SortFunc(entries, func(x, y entry) int { return cmp.Compare(x.key, y.key) })
	out := make([]json.RawMessage, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.view)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *aggregator) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

// forward passes a per-engine call to the admin API of that pod and its answer back.
func (a *aggregator) forward(w http.ResponseWriter, req *http.Request) {
	ns, name := req.PathValue("namespace"), req.PathValue("pod")
	p, err := a.client.CoreV1().Pods(ns).Get(req.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no engine for pod %s/%s", ns, name))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, "getting pod: "+err.Error())
		return
	}
	if p.Status.PodIP == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no engine for pod %s/%s: no pod IP yet", ns, name))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxAdminBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, a.podURL(p, req.URL.Path), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out.Header.Set("Content-Type", req.Header.Get("Content-Type"))
	resp, err := a.http.Do(out)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("pod %s/%s: %v", ns, name, err))
		return
	}
	relay(w, resp)
}
