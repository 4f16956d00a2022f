package kvlease_test

// The model check on kvlease with crashes between two writes: integration's
// TestModelCheckKV on an embedded nats-server, where each instance's store may
// also die between two writes of a call (OnStepForTest), now and then while
// its instance is flaky. The store completes a half-done write itself, so every
// attempt still ends with exactly one record (internal/modelcheck, rule 4).
//
// ANARCHON_KV_CRASH_SEEDS=N runs seeds 1..N (default 4, 4 at a time);
// ANARCHON_KV_CRASH_SEED=K runs seed K alone and prints its whole trace on
// failure (ANARCHON_MODEL_TRACE=1 prints it always).

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/modelcheck"
	js "github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
)

// crashWorld is integration's kmcWorld, with crashes between two writes.
var crashWorld = &modelcheck.World{
	Name:        "kv model check with crashes between two writes",
	Replay:      "ANARCHON_KV_CRASH_SEED=%d go test -race -run TestModelCheckCrashBetweenWrites ./kvlease/",
	Timing:      modelcheck.Bounded,
	HistoryKeep: 1000,
	FinalStop:   15 * time.Second,
	StopSlack:   2 * time.Second,
	CancelSlack: 500 * time.Millisecond,
	StoreSlack:  250 * time.Millisecond,
	LeaseTTL:    modelcheck.WholeSeconds,
	Faults: modelcheck.Faults{
		LostMin: 30 * time.Millisecond, LostSpread: 900 * time.Millisecond,
		SlowMax:   300 * time.Millisecond,
		CrashHang: 10 * time.Second,
	},
	ManualMin: 3 * time.Second, ManualSpread: 3 * time.Second,
	PauseSlack: 500 * time.Millisecond,
	CrashBetweenWrites: func(s modelcheck.Store, crash func(job string, slot time.Time, step string) bool) {
		if store, ok := s.Runs().(*kvlease.Store); ok {
			kvlease.OnStepForTest(store, crash)
		}
	},
}

func TestModelCheckCrashBetweenWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time model check")
	}
	seeds, err := modelcheck.SeedsFromEnv("ANARCHON_KV_CRASH_", 4)
	if err != nil {
		t.Fatal(err)
	}
	srv := singleServer(t)
	prefix := modelcheck.RunPrefix("kcw") // -count runs on the same server
	modelcheck.RunSeeds(t, crashWorld, seeds, 4, func(seed uint64) (*modelcheck.Harness, []modelcheck.Violation, error) {
		return crashSeed(srv, prefix, seed)
	})
}

// crashSeed runs one seed in a bucket of its own. Every instance, and the
// observer that reads History and Active for the check, has its own
// connection and stores.
func crashSeed(srv *embedded.Server, prefix string, seed uint64) (*modelcheck.Harness, []modelcheck.Violation, error) {
	bucket := fmt.Sprintf("%s_%d", prefix, seed)
	var clean []func()
	defer func() {
		for i := len(clean) - 1; i >= 0; i-- {
			clean[i]()
		}
	}()
	open := func() (*js.LeasedBackend, *kvlease.Store, error) {
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
		b, err := js.NewLeased(j, store, js.WithStorage(natsjs.MemoryStorage))
		return b, store, err
	}
	plan := modelcheck.RealTimePlan(seed, modelcheck.RealTime{
		Instances: 3, FaultPhase: 5 * time.Second, QuietPhase: 5 * time.Second,
		CallTimeout: time.Second, JobPrefix: prefix,
	})
	plan.AddEdges(3 * time.Second)
	plan.AddRetries()
	plan.AddEntries()
	plan.AddReadds()
	h := modelcheck.New(crashWorld, plan, func(string) (modelcheck.Store, error) {
		b, _, err := open()
		return b, err
	})
	if err := h.Run(); err != nil {
		return h, nil, err
	}
	b, store, err := open()
	if err != nil {
		return h, nil, fmt.Errorf("observer: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer b.Close(ctx) //nolint:errcheck // only what the observer opened
	return h, h.Check(ctx, b, store), nil
}
