// Command bench measures the SQL backends' hot paths on PostgreSQL (a throwaway
// server from the Debian package's binaries, default durability: fsync and
// synchronous_commit on) and SQLite (a file in WAL mode, synchronous=FULL, as
// sqlbackend.OpenSQLite opens it), and prints the same rows as the JetStream claim
// table of docs/benchmarks.md, as markdown. Each operation is measured -n times, all
// of them interleaved in one loop (order rotated) after a warm-up; every figure that
// matters is also given as a ratio to a raw single-row INSERT on the same database
// in the same run, the limit a claim is held to.
//
//	go run -C sqlbackend ./internal/bench [-n 1000] [-pg=true] [-sqlite=true]
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
	"github.com/anarchon/anarchon/sqlbackend/internal/pgtest"
)

func main() {
	n := flag.Int("n", 1000, "samples of each operation")
	withPG := flag.Bool("pg", true, "measure PostgreSQL")
	withSQLite := flag.Bool("sqlite", true, "measure SQLite")
	jobs := flag.Int("jobs", 100, "jobs every second in the load run (0: no load run)")
	seconds := flag.Int("seconds", 20, "seconds of the load run's window")
	flag.Parse()
	if err := run(*n, *withPG, *withSQLite, *jobs, *seconds); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n int, withPG, withSQLite bool, jobs, seconds int) error {
	if n < 10 {
		return fmt.Errorf("-n %d: at least 10", n)
	}
	if jobs < 0 || seconds < 1 {
		return fmt.Errorf("-jobs %d -seconds %d: jobs ≥ 0, seconds ≥ 1", jobs, seconds)
	}
	var loads []loadRow
	ctx := context.Background()
	start := time.Now()
	fmt.Printf("- command: `go run -C sqlbackend ./internal/bench -n %d -jobs %d -seconds %d`\n", n, jobs, seconds)
	fmt.Printf("- machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if withPG {
		srv, err := pgtest.Start(pgtest.Options{Durable: true})
		if err != nil {
			return err
		}
		defer srv.Stop()
		pg := database{name: "PostgreSQL", dialect: sqlbackend.Postgres, versionQuery: "SELECT version()",
			open: func() (*sql.DB, error) { return sql.Open("pgx", srv.DSN("")) }}
		if err := measure(ctx, pg, n); err != nil {
			return err
		}
		if jobs > 0 {
			r, err := load(ctx, pg.dialect, pg.open, jobs, seconds)
			if err != nil {
				return fmt.Errorf("load on PostgreSQL: %w", err)
			}
			loads = append(loads, loadRow{"PostgreSQL", r})
		}
	}
	if withSQLite {
		dir, err := os.MkdirTemp("", "anarchon-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "bench.db")
		lite := database{name: "SQLite", dialect: sqlbackend.SQLite, versionQuery: "SELECT 'SQLite ' || sqlite_version()",
			open: func() (*sql.DB, error) { return sqlbackend.OpenSQLite(path) }}
		if err := measure(ctx, lite, n); err != nil {
			return err
		}
		if jobs > 0 {
			r, err := load(ctx, lite.dialect, lite.open, jobs, seconds)
			if err != nil {
				return fmt.Errorf("load on SQLite: %w", err)
			}
			loads = append(loads, loadRow{"SQLite", r})
		}
	}
	if len(loads) > 0 {
		printLoad(loads, jobs, seconds)
	}
	fmt.Printf("\ntotal run time %v\n", time.Since(start).Round(time.Second))
	return nil
}

// op is one measured operation: fn does sample i.
type op struct {
	name, statements string
	fn               func(i int) error
	samples          []time.Duration
}

const benchLease = 5 * time.Minute

// database is one database measured: its name, its dialect, how to open a
// pool on it, and the query that reads its server's version.
type database struct {
	name         string
	dialect      sqlbackend.Dialect
	open         func() (*sql.DB, error)
	versionQuery string
}

// measure times n samples of each operation on target.
func measure(ctx context.Context, target database, n int) error {
	d := target.dialect
	// One pool per role, as separate replicas: the winner, the loser, the raw insert.
	var dbs []*sql.DB
	defer func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	}()
	newBackend := func() (*sqlbackend.Backend, error) {
		db, err := target.open()
		if err != nil {
			return nil, err
		}
		dbs = append(dbs, db)
		b, err := sqlbackend.New(db, d)
		if err != nil {
			return nil, err
		}
		return b, b.Init(ctx)
	}
	win, err := newBackend()
	if err != nil {
		return err
	}
	lose, err := newBackend()
	if err != nil {
		return err
	}
	raw := win.DB()
	var version string
	if err := raw.QueryRowContext(ctx, target.versionQuery).Scan(&version); err != nil {
		return err
	}
	if _, err := raw.ExecContext(ctx, "CREATE TABLE bench_raw (id "+d.BigInt+" PRIMARY KEY, v "+d.Text+" NOT NULL)"); err != nil {
		return err
	}
	rawInsert := "INSERT INTO bench_raw (id, v) VALUES (?, ?)"
	if d.Placeholders != nil {
		rawInsert = d.Placeholders(rawInsert)
	}
	const (
		claimJob, lostJob, leaseJob, heldJob, historyJob = "bench-claim", "bench-lost", "bench-lease", "bench-held", "bench-history"
	)
	for _, job := range []string{claimJob, lostJob, leaseJob, heldJob, historyJob} {
		if err := win.PrepareJob(ctx, backend.JobLimits{Job: job}); err != nil {
			return err
		}
	}
	base := time.UnixMilli(1_800_000_000_000)
	slot := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	token := func(kind string, i int) string { return fmt.Sprintf("%s-%d", kind, i) }
	claimIn := func(job, tok, inst string, i int) backend.ClaimInput {
		return backend.ClaimInput{Job: job, Slot: slot(i), Token: tok, Instance: inst, Attempt: 1, At: time.Now(), HistorySize: 100}
	}
	runClaim := func(job, tok, inst string, i int) backend.RunClaim {
		return backend.RunClaim{Job: job, Slot: slot(i), Token: tok, Instance: inst, Lease: benchLease, Deadline: time.Now().Add(time.Hour)}
	}
	total := n + n/10 // warm-up included
	// Set-up: slots the loser claims (already claimed), leases held and finished.
	wins, loses := win.Store(), lose.Store()
	for i := range total {
		if _, err := win.Claim(ctx, claimIn(lostJob, token("w", i), "a", i)); err != nil {
			return err
		}
		if _, err := wins.Claim(ctx, runClaim(heldJob, token("h", i), "a", i)); err != nil {
			return err
		}
	}
	held := runClaim(heldJob, "held", "a", -1)
	if _, err := wins.Claim(ctx, held); err != nil {
		return err
	}
	finished := runClaim(heldJob, "finished", "a", -2)
	if _, err := wins.Claim(ctx, finished); err != nil {
		return err
	}
	if err := wins.Finish(ctx, backend.RunKey{Job: heldJob, Slot: finished.Slot, Token: finished.Token}, backend.StatusOK); err != nil {
		return err
	}
	for i := range 120 {
		in := claimIn(historyJob, token("r", i), "a", i)
		if _, err := win.Claim(ctx, in); err != nil {
			return err
		}
		if err := win.SaveResult(ctx, historyJob, backend.StoredResult{Slot: in.Slot, Token: in.Token, Instance: "a", Attempt: 1,
			Status: backend.StatusOK, StartedAt: time.Now(), FinishedAt: time.Now()}, backend.Retention{Size: 200}); err != nil {
			return err
		}
	}

	ops := []*op{
		{name: "raw single-row INSERT (autocommit), no backend", statements: "1", fn: func(i int) error {
			_, err := raw.ExecContext(ctx, rawInsert, i, "x")
			return err
		}},
		{name: "claim won: `Backend.Claim`", statements: "1", fn: func(i int) error {
			return must(win.Claim(ctx, claimIn(claimJob, token("c", i), "a", i)))(true)
		}},
		{name: "claim lost: `Backend.Claim`, slot already claimed", statements: "2", fn: func(i int) error {
			return must(lose.Claim(ctx, claimIn(lostJob, token("l", i), "b", i)))(false)
		}},
		{name: "lease claim won, the leased win path: `RunStore.Claim`", statements: "6 (BEGIN, lock, read, insert, fence, COMMIT)", fn: func(i int) error {
			return outcome(wins.Claim(ctx, runClaim(leaseJob, token("lw", i), "a", i)))(backend.OutcomeWon)
		}},
		{name: "lease claim lost, holder running: `RunStore.Claim` → running", statements: "4 (BEGIN, lock, read, COMMIT)", fn: func(i int) error {
			return outcome(loses.Claim(ctx, runClaim(heldJob, token("lr", i), "b", -1)))(backend.OutcomeRunning)
		}},
		{name: "lease heartbeat: `RunStore.Heartbeat`", statements: "5 (BEGIN, lock, read, update, COMMIT)", fn: func(i int) error {
			return wins.Heartbeat(ctx, backend.RunKey{Job: heldJob, Slot: held.Slot, Token: held.Token}, benchLease)
		}},
		{name: "lease settle: `RunStore.Settle` (state and record)", statements: "7 (BEGIN, lock, read, update, record, trim, COMMIT; +1 NOTIFY on PostgreSQL)", fn: func(i int) error {
			return wins.Settle(ctx, backend.Settlement{Key: backend.RunKey{Job: heldJob, Slot: slot(i), Token: token("h", i)},
				Status: backend.StatusOK, StartedAt: time.Now(), FinishedAt: time.Now(), Retention: backend.Retention{Size: 200}})
		}},
		{name: "lease claim lost, slot finished: `RunStore.Claim` → done", statements: "4", fn: func(i int) error {
			return outcome(loses.Claim(ctx, runClaim(heldJob, token("ld", i), "b", -2)))(backend.OutcomeDone)
		}},
		{name: "history read of 10 records: `Backend.History`", statements: "1", fn: func(i int) error {
			return count(win.History(ctx, historyJob, 10))(10)
		}},
		{name: "history read of 100 records: `Backend.History`", statements: "1", fn: func(i int) error {
			return count(lose.History(ctx, historyJob, 100))(100)
		}},
	}
	warm := n / 10
	for i := range total {
		for k := range ops {
			o := ops[(i+k)%len(ops)]
			t0 := time.Now()
			if err := o.fn(i); err != nil {
				return fmt.Errorf("%s, sample %d: %w", o.name, i, err)
			}
			if i >= warm {
				o.samples = append(o.samples, time.Since(t0))
			}
		}
	}

	fmt.Printf("\n#### %s\n\n- server: %s\n\n", target.name, strings.TrimSpace(version))
	fmt.Println("| operation | p50 | p99 | p50 / raw | p99 / raw | statements |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	rawP50, rawP99 := pct(ops[0].samples, 50), pct(ops[0].samples, 99)
	for _, o := range ops {
		p50, p99 := pct(o.samples, 50), pct(o.samples, 99)
		fmt.Printf("| %s | %s | %s | %.2f | %.2f | %s |\n", o.name, dur(p50), dur(p99),
			float64(p50)/float64(rawP50), float64(p99)/float64(rawP99), o.statements)
	}
	return nil
}

func must(won bool, err error) func(want bool) error {
	return func(want bool) error {
		if err != nil {
			return err
		}
		if won != want {
			return fmt.Errorf("claim answered %v, want %v", won, want)
		}
		return nil
	}
}

func outcome(res backend.ClaimResult, err error) func(want backend.ClaimOutcome) error {
	return func(want backend.ClaimOutcome) error {
		if err != nil {
			return err
		}
		if res.Outcome != want {
			return fmt.Errorf("lease claim answered %s, want %s", res.Outcome, want)
		}
		return nil
	}
}

func count(recs []backend.RunRecord, err error) func(want int) error {
	return func(want int) error {
		if err != nil {
			return err
		}
		if len(recs) != want {
			return fmt.Errorf("history gave %d records, want %d", len(recs), want)
		}
		return nil
	}
}

func pct(s []time.Duration, p int) time.Duration {
	s = slices.Clone(s)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

type loadRow struct {
	name string
	r    *loadResult
}

func printLoad(rows []loadRow, jobs, seconds int) {
	fmt.Printf("\n#### Load: %d jobs every second × 3 instances × %ds, leases on\n\n", jobs, seconds)
	fmt.Printf("Each instance has its own pool of at most %d connections; every job `Every(1s)`", loadPool)
	fmt.Println(", no jitter, max lateness 1s; a slot counts when its handler started; the window opens 2s after Start.")
	fmt.Println()
	head := "| metric |"
	sep := "| --- |"
	for _, r := range rows {
		head += " " + r.name + " |"
		sep += " --- |"
	}
	fmt.Println(head)
	fmt.Println(sep)
	line := func(name string, f func(r *loadResult) string) {
		s := "| " + name + " |"
		for _, r := range rows {
			s += " " + f(r.r) + " |"
		}
		fmt.Println(s)
	}
	line("start-up: Start of 3 instances in parallel", func(r *loadResult) string { return dur(r.startup) })
	line("slots due", func(r *loadResult) string { return fmt.Sprint(r.due) })
	line("runs", func(r *loadResult) string { return fmt.Sprint(r.runs) })
	line("duplicates (must be 0)", func(r *loadResult) string { return fmt.Sprint(r.dups) })
	line("… of which two starts of one attempt (two winners)", func(r *loadResult) string { return fmt.Sprint(r.sameAttempt) })
	line("missed", func(r *loadResult) string {
		return fmt.Sprintf("%d (%.2f%%)", r.missed, 100*float64(r.missed)/float64(max(r.due, 1)))
	})
	line("slot lag (handler start − slot) p50 / p99 / max", func(r *loadResult) string {
		if len(r.lag) == 0 {
			return "–"
		}
		return dur(r.lag[len(r.lag)/2]) + " / " + dur(r.lag[len(r.lag)*99/100]) + " / " + dur(r.lag[len(r.lag)-1])
	})
	line("backend errors, by message (a sample)", func(r *loadResult) string {
		if len(r.errSample) == 0 {
			return "none"
		}
		msgs := make([]string, 0, len(r.errSample))
		for m, n := range r.errSample {
			msgs = append(msgs, fmt.Sprintf("%d × %s", n, strings.ReplaceAll(m, "|", "/")))
		}
		slices.Sort(msgs)
		return strings.Join(msgs, "; ")
	})
	line("scheduler events (all, whole run)", func(r *loadResult) string {
		kinds := make([]string, 0, len(r.events))
		for k := range r.events {
			kinds = append(kinds, string(k))
		}
		slices.Sort(kinds)
		s := ""
		for i, k := range kinds {
			if i > 0 {
				s += ", "
			}
			s += fmt.Sprintf("%s: %d", k, r.events[scheduler.EventKind(k)])
		}
		return s
	})
}
