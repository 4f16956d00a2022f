package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anarchon/anarchon/metrics"
)

// metricsServer serves the scheduler's metrics, and the Go runtime's, from a registry
// of its own at /metrics.
type metricsServer struct {
	m    *metrics.Metrics
	srv  *http.Server
	done chan struct{}
}

// serveMetrics listens on addr and serves /metrics until shutdown. It returns once
// the listener is bound, so a port that is taken is an error here, not a log line
// later; with port 0 the log tells the port picked.
func serveMetrics(addr string, log *slog.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m, err := metrics.Wire(reg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	ms := &metricsServer{
		m: m,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(ms.done)
		if err := ms.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String()+"/metrics")
	return ms, nil
}

// shutdown stops the server, letting a scrape in progress finish until ctx ends.
func (ms *metricsServer) shutdown(ctx context.Context) {
	if err := ms.srv.Shutdown(ctx); err != nil {
		ms.srv.Close()
	}
	<-ms.done
}
