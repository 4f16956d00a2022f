package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/web"
)

// webPrefix is where the status page is mounted.
const webPrefix = "/anarchon/"

// serveWeb serves the status page (package web) on addr while the quickstart runs
// ("" = off), reading the fleet through a fleet.Client on nc. Actions (run now,
// pause, resume) are allowed to requests from this machine only, for a loopback
// Host (web.Config.Hosts is empty: the page answers to the address it prints, and
// a page of another site whose name is re-pointed at 127.0.0.1 may not act). It
// returns the page's URL.
func serveWeb(addr string, nc *nats.Conn, out io.Writer) (url string, stop func(), err error) {
	if addr == "" {
		return "", func() {}, nil
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		return "", nil, err
	}
	h, err := web.New(web.Config{Source: client, Prefix: webPrefix, Authorize: web.AllowLoopback, Title: "anarchon quickstart"})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-web: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(webPrefix, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(out, "status page server:", err)
		}
	}()
	return "http://" + ln.Addr().String() + webPrefix, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
