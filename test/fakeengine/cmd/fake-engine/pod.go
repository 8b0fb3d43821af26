package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/loraplane/loraplane/test/fakeengine"
)

// servePod serves one engine for the pod this process runs in (the fake engine image on
// kind) until ctx ends, and with --pod-admin-address the admin API for that one engine, so
// that an aggregator (--aggregate) can offer the same admin API over every pod as the
// host-mode process does over the kwok pods.
func servePod(ctx context.Context, o options) error {
	preload, err := parsePreload(o.preload)
	if err != nil {
		return fmt.Errorf("--preload: %w", err)
	}
	capacity, err := fakeengine.CapacityFromArgs(fakeengine.Kind(o.engine), o.loraArgs)
	if err != nil {
		return err
	}
	e, err := fakeengine.StartInPod(o.port, fakeengine.Options{
		BaseModel: o.baseModel, Kind: fakeengine.Kind(o.engine), APIKey: o.apiKey, Latency: o.latency,
		Name: o.podName, Preload: preload, Capacity: capacity,
	})
	if err != nil {
		return err
	}
	defer e.Close()
	klog.InfoS("Serving a fake engine for this pod", "address", e.Addr(), "kind", o.engine, "baseModel", o.baseModel, "capacity", e.Limit())
	if o.podAdminAddress == "" {
		<-ctx.Done()
		return nil
	}
	if o.podNamespace == "" || o.podName == "" {
		return errors.New("--pod-admin-address needs --pod-namespace and --pod-name (or $POD_NAMESPACE and $POD_NAME from the downward API)")
	}
	m := newManager(klog.FromContext(ctx), fakeengine.Options{APIKey: o.apiKey, Latency: o.latency})
	m.add(engineSpec{
		Namespace: o.podNamespace, Pod: o.podName, IP: o.podIP, Port: o.port,
		Kind: e.Kind(), BaseModel: o.baseModel, Capacity: e.Capacity(),
	}, e)
	return serveAdmin(ctx, o.podAdminAddress, adminHandler(m))
}

// serveAdmin serves h on address until ctx ends.
func serveAdmin(ctx context.Context, address string, h http.Handler) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp4", address)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	klog.InfoS("Serving admin API", "address", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("admin API: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	return nil
}
