package integration

// A randomised model check of the lease path on the real stores: the kvlease RunStore
// and the JetStream LeasedBackend on an embedded nats-server, in real time (NATS
// cannot run under testing/synctest). It is the short variant of the scheduler
// package's TestModelCheck (scheduler/modelcheck_test.go) and shares its harness,
// faults, record and invariants (internal/modelcheck): each seed runs 3 instances,
// each with its own connection, kvlease store and backend, seen through a faulty
// wrapper (lost answers, lost and slow requests, crashes, paused heartbeats), with
// clock offsets, stops, restarts and RunNow calls during a fault phase, then a quiet
// phase, then a final Stop. In real time a store call is applied somewhere between
// its send and its answer, so the invariants are judged with the bounds that allows
// (modelcheck.Bounded). Plans whose jobs run through schedule entries run them
// every Interval without entries while these stores keep none
// (backend.EntryStore).
//
// ANARCHON_KV_MODEL_SEEDS=N runs seeds 1..N (default 12, 4 at a time, from
// ANARCHON_KV_MODEL_SEED_FROM); ANARCHON_KV_MODEL_SEED=K runs seed K alone and prints
// its whole trace on failure (ANARCHON_MODEL_TRACE=1 prints it always).

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/modelcheck"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
)

const (
	kmcDefaultSeeds = 12
	kmcConcurrent   = 4
	kmcInstances    = 3
	kmcFaultPhase   = 5 * time.Second
	kmcQuietPhase   = 5 * time.Second
	kmcCallTimeout  = time.Second
)

// kmcWorld: real time, so the record keeps bounds, and short waits.
var kmcWorld = &modelcheck.World{
	Name:        "kv model check",
	Replay:      "ANARCHON_KV_MODEL_SEED=%d go test -race -run TestModelCheckKV ./integration/",
	Timing:      modelcheck.Bounded,
	HistoryKeep: 1000,
	FinalStop:   15 * time.Second,
	StopSlack:   2 * time.Second,
	// Real time: goroutine scheduling under -race.
	CancelSlack: 500 * time.Millisecond,
	// The rounding of the server's TTL clock.
	StoreSlack: 250 * time.Millisecond,
	// kvlease stores a lease's TTL in whole seconds.
	LeaseTTL: modelcheck.WholeSeconds,
	Faults: modelcheck.Faults{
		LostMin: 30 * time.Millisecond, LostSpread: 900 * time.Millisecond,
		SlowMax:   300 * time.Millisecond,
		CrashHang: 10 * time.Second,
	},
	ManualMin: 3 * time.Second, ManualSpread: 3 * time.Second,
	// A pause reaches the other instances through the bucket's watch.
	PauseSlack: 500 * time.Millisecond,
}

func TestModelCheckKV(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time model check")
	}
	seeds, err := modelcheck.SeedsFromEnv("ANARCHON_KV_MODEL_", kmcDefaultSeeds)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Server(t, embedded.Options{})
	prefix := modelcheck.RunPrefix("kmc") // -count runs on the same server
	modelcheck.RunSeeds(t, kmcWorld, seeds, kmcConcurrent, func(seed uint64) (*modelcheck.Harness, []modelcheck.Violation, error) {
		r := kmcRunSeed(srv, prefix, seed)
		return r.h, r.vs, r.err
	})
}

type kmcResult struct {
	h   *modelcheck.Harness
	vs  []modelcheck.Violation
	err error // the world could not be set up
}

// kmcRunSeed runs one seed in a bucket of its own. Every instance, and the observer
// that reads History and Active for the check, has its own connection and stores.
func kmcRunSeed(srv *embedded.Server, prefix string, seed uint64) (res kmcResult) {
	bucket := fmt.Sprintf("%s_%d", prefix, seed)
	var clean []func()
	defer func() {
		for i := len(clean) - 1; i >= 0; i-- {
			clean[i]()
		}
	}()
	open := func() (*jetstream.LeasedBackend, *kvlease.Store, error) {
		nc, err := srv.Connect()
		if err != nil {
			return nil, nil, err
		}
		clean = append(clean, nc.Close)
		j, err := natsjs.New(nc)
		if err != nil {
			return nil, nil, err
		}
		store, err := kvlease.New(j, kvlease.WithBucket(bucket), kvlease.WithStorage(natsjs.MemoryStorage))
		if err != nil {
			return nil, nil, err
		}
		clean = append(clean, store.Close)
		b, err := jetstream.NewLeased(j, store, jetstream.WithStorage(natsjs.MemoryStorage))
		return b, store, err
	}
	res.h = modelcheck.New(kmcWorld, kmcNewPlan(prefix, seed), func(string) (modelcheck.Store, error) {
		b, _, err := open()
		return b, err
	})
	if res.err = res.h.Run(); res.err != nil {
		return res
	}
	b, store, err := open()
	if err != nil {
		res.err = fmt.Errorf("observer: %w", err)
		return res
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer b.Close(ctx) //nolint:errcheck // only what the observer opened
	res.vs = res.h.Check(ctx, b, store)
	return res
}

// kmcNewPlan draws seed's plan: 3 instances, 1–2 jobs, and what befalls them.
func kmcNewPlan(prefix string, seed uint64) *modelcheck.Plan {
	p := modelcheck.RealTimePlan(seed, modelcheck.RealTime{
		Instances: kmcInstances, FaultPhase: kmcFaultPhase, QuietPhase: kmcQuietPhase,
		CallTimeout: kmcCallTimeout, JobPrefix: prefix,
	})
	p.AddEdges(3 * time.Second)
	p.AddRetries()
	p.AddEntries()
	p.AddHolderCrashes()
	p.AddReadds()
	p.AddOutages()
	p.AddBackfills()
	p.AddRedeploys()
	p.AddFreezes()
	p.AddSkew(time.Second)
	return p
}
