package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anarchon/anarchon/metrics"
)

// metricsServer serves the scheduler's metrics, and the Go runtime's, from a registry
// of its own at /metrics.
type metricsServer struct {
	*httpServer
	m *metrics.Metrics
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
	ms := &metricsServer{httpServer: serveHTTP(ln, mux, log, "metrics"), m: m}
	log.Info("serving metrics", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String()+"/metrics")
	return ms, nil
}
