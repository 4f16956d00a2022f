package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/web"
)

// A replica serves the fleet service; the status page reads it through a
// fleet.Client and is mounted on the service's own mux, read-only.
func ExampleNew() {
	ctx := context.Background()
	ns, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		panic(err)
	}
	defer ns.Shutdown()
	nc, err := ns.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	s, _ := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "replica-1"})
	_ = s.Every("reconcile", time.Hour, func(context.Context, scheduler.Run) error { return nil })
	_ = s.Start(ctx)
	defer s.Stop(ctx)
	svc, _ := fleet.Serve(ctx, nc, s)
	defer svc.Stop(ctx)

	client, _ := fleet.NewClient(nc)
	h, err := web.New(web.Config{Source: client, Prefix: "/anarchon/"}) // no Authorize: read-only
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/anarchon/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, _ := http.Get(srv.URL + "/anarchon/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.Contains(string(page), `<a href="/anarchon/job/reconcile">reconcile</a>`))

	resp, _ = http.Post(srv.URL+"/anarchon/job/reconcile/run", "", nil)
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// 200 true
	// 403
}
