package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// httpServer is one of the service's HTTP servers (metrics, status page), serving
// on a listener already bound, so that a taken port is an error at start-up.
type httpServer struct {
	srv  *http.Server
	done chan struct{}
}

// serveHTTP serves h on ln until shutdown; what names the server in the log.
func serveHTTP(ln net.Listener, h http.Handler, log *slog.Logger, what string) *httpServer {
	s := &httpServer{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" server failed", "err", err)
		}
	}()
	return s
}

// shutdown stops the server, letting a request in progress finish until ctx ends.
func (s *httpServer) shutdown(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}
