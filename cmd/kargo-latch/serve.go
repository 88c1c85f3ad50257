package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// serveMetrics serves /metrics from reg on addr until ctx is done, and Go's
// profiles under /debug/pprof/ when profiling is on. An addr of "0" turns
// it off.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, profiling bool) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return serve(ctx, "metrics", addr, mux)
}

// serveProbes serves /healthz (the process is up) and /readyz on addr until
// ctx is done. ready returns nil when ready, else the reason, which /readyz
// answers with (a missing CRD or RBAC right, say). notes are what /readyz
// says beside its verdict, one a line, without counting them: an optional
// feature's problem (verify-on-latch's) never makes the operator unready.
func serveProbes(ctx context.Context, addr string, ready func() error, notes func() []string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		detail := strings.Join(notes(), "\n")
		if detail != "" {
			detail = "\n" + detail
		}
		if err := ready(); err != nil {
			http.Error(w, err.Error()+detail, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok" + detail))
	})
	return serve(ctx, "health probes", addr, mux)
}

// serve listens first, so that a taken port fails the start, then serves in
// the background until ctx is done.
func serve(ctx context.Context, what, addr string, h http.Handler) error {
	if addr == "0" || addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	logger := klog.FromContext(ctx)
	logger.Info("Serving", "what", what, "address", l.Addr().String())
	go func() {
		<-ctx.Done()
		// ctx is done: give in-flight scrapes a moment on a fresh context.
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server stopped", "what", what)
		}
	}()
	return nil
}
