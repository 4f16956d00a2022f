package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/fleet"
	anotel "github.com/anarchon/anarchon/otel"
	"github.com/anarchon/anarchon/web"
)

// webPrefix is where the status page is mounted.
const webPrefix = "/anarchon/"

// serveWeb listens on addr and serves the status page (package web: every replica
// of the fleet, as the fleet service answers, read through a fleet.Client on the
// replica's connection) until shutdown. Actions (run now, pause, resume) are off
// unless actions is set, and then allowed to requests from this machine only. The
// page answers to the hosts listed (web.Config.Hosts) and refuses any other Host;
// with none it answers any Host and allows actions for a loopback one only. A
// taken port is an error here; with port 0 the log tells the URL.
func serveWeb(addr string, actions bool, hosts []string, nc *nats.Conn, log *slog.Logger) (*httpServer, error) {
	client, err := fleet.NewClient(nc, anotel.ClientOption()) // run now carries the page's trace context
	if err != nil {
		return nil, err
	}
	cfg := web.Config{Source: client, Prefix: webPrefix, Logger: log, Hosts: hosts}
	if actions {
		cfg.Authorize = web.AllowLoopback
	}
	h, err := web.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-web: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(webPrefix, h)
	ws := serveHTTP(ln, mux, log, "status page")
	log.Info("serving the status page", "url", "http://"+ln.Addr().String()+webPrefix, "actions", actions)
	return ws, nil
}
