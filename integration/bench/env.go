package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
)

// startServer starts an embedded nats-server listening on loopback TCP, so every
// client call below pays a real network round trip. storeDir "" is a temporary store
// that Shutdown removes.
func startServer(ctx context.Context, storeDir string) (*embedded.Server, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Options{Listen: "127.0.0.1:0", StoreDir: storeDir, ReadyTimeout: 60 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("start embedded nats-server: %w", err)
	}
	return srv, nil
}

// client is one TCP connection with its JetStream context.
type client struct {
	nc *nats.Conn
	js natsjs.JetStream
}

// dial opens a TCP connection to srv (never in-process: the round trip is the point).
func dial(srv *embedded.Server, name string) (*client, error) {
	nc, err := nats.Connect(srv.ClientURL(), nats.Name(name), nats.MaxReconnects(0))
	if err != nil {
		return nil, fmt.Errorf("connect %s to %s: %w", name, srv.ClientURL(), err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &client{nc: nc, js: js}, nil
}

// msgs is a connection's message counters: a request and its answer are one out and
// one in, so the deltas around a call count its round trips.
type msgs struct{ out, in uint64 }

func counters(nc *nats.Conn) msgs {
	st := nc.Stats()
	return msgs{out: st.OutMsgs, in: st.InMsgs}
}

func (m msgs) sub(o msgs) msgs { return msgs{out: m.out - o.out, in: m.in - o.in} }

// proc is a reading of the whole process: the embedded server and every client run
// in it, so these numbers are theirs together.
type proc struct {
	at         time.Time
	cpu        time.Duration // user + system, whole process
	rss        int64         // VmRSS in bytes, -1 when unknown
	heapInuse  uint64
	sys        uint64 // bytes obtained from the OS by the Go runtime
	goroutines int
}

func readProc() proc {
	p := proc{at: time.Now(), cpu: cpuTime(), rss: rssBytes(), goroutines: runtime.NumGoroutine()}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.heapInuse, p.sys = ms.HeapInuse, ms.Sys
	return p
}

// settledProc collects garbage first, so heap numbers are what is live.
func settledProc() proc {
	runtime.GC()
	debug.FreeOSMemory()
	return readProc()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes reads VmRSS from /proc/self/status (Linux); -1 elsewhere.
func rssBytes() int64 {
	v, ok := procStatus("VmRSS")
	if !ok {
		return -1
	}
	return v
}

func procStatus(field string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// rssSampler records the highest RSS seen while it runs, and the RSS at every
// whole mark of time since it started.
type rssSampler struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	peak  int64
	marks []int64
}

func sampleRSS(every, mark time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{}), peak: rssBytes()}
	start := time.Now()
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				if r := rssBytes(); r > 0 {
					s.mu.Lock()
					s.peak = max(s.peak, r)
					if time.Since(start) >= time.Duration(len(s.marks)+1)*mark {
						s.marks = append(s.marks, r)
					}
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the peak and the RSS at each whole mark.
func (s *rssSampler) Stop() (int64, []int64) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.peak, rssBytes()), s.marks
}

// durations is a latency sample.
type durations []time.Duration

// pct returns the p-th percentile (0 < p <= 100), nearest rank.
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (d durations) max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// waitUntil sleeps until t or ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
