package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// webPrefix is where the status page is mounted.
const webPrefix = "/anarchon/"

// webServer serves the status page (package web): every replica of the fleet, as
// the fleet service answers, read through a fleet.Client on the replica's
// connection.
type webServer struct {
	srv  *http.Server
	done chan struct{}
}

// serveWeb listens on addr and serves the status page until shutdown. Actions
// (run now, pause, resume) are off unless actions is set, and then allowed to
// requests from this machine only. A taken port is an error here; with port 0
// the log tells the URL.
func serveWeb(addr string, actions bool, nc *nats.Conn, log *slog.Logger) (*webServer, error) {
	client, err := fleet.NewClient(nc)
	if err != nil {
		return nil, err
	}
	cfg := web.Config{Source: client, Prefix: webPrefix, Logger: log}
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
	ws := &webServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(ws.done)
		if err := ws.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("status page server failed", "err", err)
		}
	}()
	log.Info("serving the status page", "url", "http://"+ln.Addr().String()+webPrefix, "actions", actions)
	return ws, nil
}

// shutdown stops the server, letting a page in progress finish until ctx ends.
func (ws *webServer) shutdown(ctx context.Context) {
	if err := ws.srv.Shutdown(ctx); err != nil {
		ws.srv.Close()
	}
	<-ws.done
}
