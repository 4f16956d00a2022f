package sqlbackend_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/sqlbackend"
)

// Two replicas claim the same slot through their own pools on one SQLite file:
// one wins, and the file remembers which.
func Example() {
	dir, _ := os.MkdirTemp("", "anarchon-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "schedule.db")
	ctx := context.Background()
	slot := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	for _, replica := range []string{"replica-1", "replica-2"} {
		db, err := sqlbackend.OpenSQLite(path)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, err := sqlbackend.New(db, sqlbackend.SQLite)
		if err != nil {
			fmt.Println(err)
			return
		}
		won, err := b.Claim(ctx, backend.ClaimInput{Job: "report", Slot: slot, Token: "token-of-" + replica, Instance: replica, Attempt: 1})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s won: %v\n", replica, won)
		hist, _ := b.History(ctx, "report", 10)
		fmt.Printf("history: %s ran on %s (%s)\n", hist[0].Slot.Format(time.Kitchen), hist[0].Instance, hist[0].Status)
		_ = b.Close(ctx)
		_ = db.Close()
	}
	// Output:
	// replica-1 won: true
	// history: 9:00AM ran on replica-1 (running)
	// replica-2 won: false
	// history: 9:00AM ran on replica-1 (running)
}
