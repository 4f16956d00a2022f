package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/stepclock"
)

// A RunStore gives each run one lease holder at a time; the store's clock decides
// when a lease has expired. When the holder dies (stops heartbeating), a backup's
// claim takes the run over with a new attempt and a larger fence, and the old
// holder can no longer finish it.
func ExampleRunStore() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 0, 0))
	store := memory.NewRunStore(clock)
	claim := func(token, instance string) backend.ClaimResult {
		res, err := store.Claim(ctx, backend.RunClaim{
			Job: "billing", Slot: at(12, 0, 0), Token: token, Instance: instance,
			Lease: 30 * time.Second, Deadline: at(12, 1, 0),
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s (attempt %d, fence %d, holder %s)\n", instance, res.Outcome, res.Attempt, res.Fence, res.Holder)
		return res
	}

	claim("token-a", "a") // a wins and would now run the handler
	claim("token-b", "b") // b stands by as a backup
	clock.Set(at(12, 0, 31))
	claim("token-b", "b") // a's lease expired unfinished: b takes over

	err := store.Finish(ctx, backend.RunKey{Job: "billing", Slot: at(12, 0, 0), Token: "token-a"}, backend.StatusOK)
	fmt.Println("a finishes late:", errors.Is(err, backend.ErrStaleToken))
	if err := store.Finish(ctx, backend.RunKey{Job: "billing", Slot: at(12, 0, 0), Token: "token-b"}, backend.StatusOK); err != nil {
		panic(err)
	}
	claim("token-c", "c") // anyone later is told it is done
	// Output:
	// a: won (attempt 1, fence 1, holder a)
	// b: running (attempt 1, fence 1, holder a)
	// b: won (attempt 2, fence 2, holder b)
	// a finishes late: true
	// c: done (attempt 2, fence 2, holder b)
}

// Every decision is stored before anyone acts on it. A claim answered overlap has
// stored the slot as skipped, so every later claim of that slot is answered done.
func ExampleRunStore_overlap() {
	ctx := context.Background()
	clock := stepclock.New(at(12, 1, 0))
	store := memory.NewRunStore(clock)
	claim := func(slot time.Time, token string) {
		res, err := store.Claim(ctx, backend.RunClaim{
			Job: "import", Slot: slot, Token: token, Instance: token,
			Lease: 5 * time.Minute, Deadline: slot.Add(time.Minute), Overlap: backend.OverlapSkip,
		})
		if err != nil {
			panic(err)
		}
		line := fmt.Sprintf("%s %s: %s", slot.Format("15:04"), token, res.Outcome)
		if res.Status != "" {
			line += ", stored " + string(res.Status)
		}
		fmt.Println(line)
	}
	claim(at(12, 0, 0), "a") // still running at 12:01
	claim(at(12, 1, 0), "b") // forbidden beside it: stored skipped
	claim(at(12, 1, 0), "c") // a later claim follows the stored decision
	// Output:
	// 12:00 a: won
	// 12:01 b: overlap, stored skipped
	// 12:01 c: done, stored skipped
}

// at is 2030-01-01 (a Tuesday) at hh:mm:ss UTC: the examples' fixed times.
func at(hh, mm, ss int) time.Time { return time.Date(2030, 1, 1, hh, mm, ss, 0, time.UTC) }
