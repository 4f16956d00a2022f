package sqlbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/option"
)

// Backend is a backend.Backend on a SQL database, with leases: it implements
// backend.LeaseBackend (Runs, a backend.Settler), backend.Pauser,
// backend.LastRunsReader and backend.EntryStore. Every replica opens its own *sql.DB on the same
// database and gets a Backend from New; the database decides.
type Backend struct {
	db      *sql.DB
	dialect Dialect
	opts    options

	stmtMu sync.Mutex
	stmts  map[string]string

	initMu sync.Mutex
	inited bool

	hub  *hub
	runs *RunStore
}

var (
	_ backend.Backend        = (*Backend)(nil)
	_ backend.LeaseBackend   = (*Backend)(nil)
	_ backend.Pauser         = (*Backend)(nil)
	_ backend.LastRunsReader = (*Backend)(nil)
	_ backend.EntryStore     = (*Backend)(nil)
	_ backend.OnceRecorder   = (*Backend)(nil)
)

// SchemaVersion is the version of the tables this package creates and reads. Init
// records it and migrates tables of an older version to it; a database whose
// tables a newer version of this package created is refused with ErrSchemaTooNew.
//
// Version 2 added the runs table's retry columns (backend.Retrier). Version 3
// added the history's backfill columns. Version 4 added the runs table's cancel
// request columns (backend.OverlapCanceller). Version 5 added the count of runs
// (backend.RunCounter). Version 6 added the schedule entries (backend.EntryStore).
// Version 7 added the runs table's columns of the machine's fields
// (backend/machine). Version 8 added the calendars (backend.CalendarStore).
const SchemaVersion = 8

// New returns a backend on db (which it does not close) speaking dialect. Nothing
// is read or written before Init. Bound db's pool (SetMaxOpenConns, 10 is plenty):
// every job due at a slot is claimed at once, and an unbounded pool opens a
// connection per concurrent claim.
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlbackend: New: nil *sql.DB", backend.ErrInvalidConfig)
	}
	if err := dialect.check(); err != nil {
		return nil, err
	}
	o := options{prefix: DefaultTablePrefix, callTimeout: DefaultCallTimeout, tombstones: DefaultEntryTombstones}
	if err := option.Apply(&o, opts); err != nil {
		return nil, err
	}
	if o.poll == 0 {
		o.poll = DefaultPollInterval
		if dialect.Listen != nil {
			o.poll = DefaultNotifyPollInterval
		}
	}
	b := &Backend{db: db, dialect: dialect, opts: o, stmts: map[string]string{}}
	b.hub = newHub(b)
	b.runs = &RunStore{b: b}
	return b, nil
}

func (d Dialect) check() error {
	var missing []string
	for name, v := range map[string]string{"Name": d.Name, "BigInt": d.BigInt, "Text": d.Text, "AutoID": d.AutoID, "NowMs": d.NowMs} {
		if strings.TrimSpace(v) == "" {
			missing = append(missing, name)
		}
	}
	if d.IgnoreConflict == nil {
		missing = append(missing, "IgnoreConflict")
	}
	if d.ForUpdate == "" && d.Serialize == "" {
		missing = append(missing, "ForUpdate or Serialize")
	}
	if (d.Notify == "") != (d.Listen == nil) {
		missing = append(missing, "Notify and Listen (both or neither)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrDialect, strings.Join(missing, ", "))
	}
	return nil
}

// Name returns "sql/" and the dialect's name, e.g. "sql/postgres".
func (b *Backend) Name() string { return "sql/" + b.dialect.Name }

// DedupeWindow is backend.Forever, or the retention given by WithClaimRetention.
func (b *Backend) DedupeWindow() time.Duration {
	if b.opts.claimKeep > 0 {
		return b.opts.claimKeep
	}
	return backend.Forever
}

// Runs returns the backend's lease store, in the same database.
func (b *Backend) Runs() backend.RunStore { return b.runs }

// Store returns the backend's lease store as its concrete type.
func (b *Backend) Store() *RunStore { return b.runs }

// TablePrefix returns the prefix of the backend's table names.
func (b *Backend) TablePrefix() string { return b.opts.prefix }

// DB returns the database the backend was given.
func (b *Backend) DB() *sql.DB { return b.db }

// Close stops the backend's watchers (and the connection a listening dialect
// holds). It does not close the *sql.DB, which the caller opened.
func (b *Backend) Close(ctx context.Context) error {
	b.hub.close()
	return nil
}

// PrepareJob stores the job's row, whose lock serialises the job's lease claims.
func (b *Backend) PrepareJob(ctx context.Context, job backend.JobLimits) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := backend.ValidateJobName(job.Job); err != nil {
		return err
	}
	if err := b.Init(ctx); err != nil {
		return err
	}
	_, err := b.db.ExecContext(ctx, b.q(ignore, "INSERT INTO {p}jobs (job, fence, hist_floor) VALUES (?, 0, 0)"), job.Job)
	if err != nil {
		return fmt.Errorf("sqlbackend: prepare job %q: %w", job.Job, err)
	}
	return nil
}

// Claim stores the first token to claim (job, slot) and reports whether in's token
// is the stored one. It is one insert that does nothing on a conflict. When it
// stored nothing, a read of the token that is stored follows: a repeated claim by
// the winner, whose first answer was lost, wins again. The claim is also the run's
// history record.
func (b *Backend) Claim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if err := checkClaimInput(in); err != nil {
		return false, err
	}
	if err := b.Init(ctx); err != nil {
		return false, err
	}
	won, err := b.insertClaim(ctx, in)
	if err != nil {
		return false, fmt.Errorf("sqlbackend: claim %s: %w", describe(in.Job, in.Slot), err)
	}
	return won, nil
}

func (b *Backend) insertClaim(ctx context.Context, in backend.ClaimInput) (bool, error) {
	for range 3 {
		res, err := b.db.ExecContext(ctx, b.q(ignore, `INSERT INTO {p}claims (job, slot, token, instance, attempt, requested_by, at_ms, created, expires, backfill)
			VALUES (?, ?, ?, ?, ?, ?, ?, {now}, {now} + ?, ?)`),
			in.Job, in.Slot.UnixMilli(), in.Token, in.Instance, max(in.Attempt, 1), in.RequestedBy, msOf(in.At), ttlMs(in.HistoryTTL), boolInt(in.Backfill))
		if err != nil {
			return false, err
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			return true, nil
		}
		var token string
		err = b.db.QueryRowContext(ctx, b.q(0, "SELECT token FROM {p}claims WHERE job = ? AND slot = ?"), in.Job, in.Slot.UnixMilli()).Scan(&token)
		if errors.Is(err, sql.ErrNoRows) {
			continue // forgotten between the two statements (claim retention): again
		}
		if err != nil {
			return false, err
		}
		return token == in.Token, nil
	}
	return false, errors.New("the slot's claim kept disappearing")
}

// RecordManualRun records a RunNow run; it is never de-duplicated.
func (b *Backend) RecordManualRun(ctx context.Context, in backend.ClaimInput) (time.Time, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	in.Manual = true
	if err := checkClaimInput(in); err != nil {
		return time.Time{}, err
	}
	if err := b.Init(ctx); err != nil {
		return time.Time{}, err
	}
	_, err := b.db.ExecContext(ctx, b.q(ignore, `INSERT INTO {p}records (job, slot, token, instance, attempt, manual, requested_by, at_ms, expires, backfill)
		VALUES (?, ?, ?, ?, ?, 1, ?, ?, {now} + ?, ?)`),
		in.Job, in.Slot.UnixMilli(), in.Token, in.Instance, max(in.Attempt, 1), in.RequestedBy, msOf(in.At), ttlMs(in.HistoryTTL), boolInt(in.Backfill))
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlbackend: record manual run %s: %w", describe(in.Job, in.Slot), err)
	}
	return in.Slot, nil
}

// checkClaimInput rejects a claim no backend can accept; the error matches
// backend.ErrInvalidClaim.
func checkClaimInput(in backend.ClaimInput) error {
	return backendutil.CheckClaim("sqlbackend", in.Job, in.Token)
}

// Statement flags for q.
const (
	ignore = 1 << iota // rewrite the INSERT with Dialect.IgnoreConflict
)

// q returns the statement s for this backend: {p} is the table prefix, {now} the
// server clock, {int} and {text} the column types, ? the driver's placeholders.
// Statements are built once and remembered.
func (b *Backend) q(flags int, s string) string {
	key := fmt.Sprint(flags) + s
	b.stmtMu.Lock()
	defer b.stmtMu.Unlock()
	if out, ok := b.stmts[key]; ok {
		return out
	}
	out := strings.NewReplacer(
		"{p}", b.opts.prefix,
		"{now}", b.dialect.NowMs,
		"{int}", b.dialect.BigInt,
		"{text}", b.dialect.Text,
		"{autoid}", b.dialect.AutoID,
	).Replace(s)
	if flags&ignore != 0 {
		out = b.dialect.IgnoreConflict(out)
	}
	if b.dialect.Placeholders != nil {
		out = b.dialect.Placeholders(out)
	}
	b.stmts[key] = out
	return out
}

// callCtx gives ctx the call timeout when it has no deadline of its own, so that a
// call never waits forever on a database that does not answer. The caller must
// call cancel.
func (b *Backend) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return backendutil.CallContext(ctx, b.opts.callTimeout)
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func timeOf(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// ttlMs is a history TTL as the parameter of "{now} + ?": nil (NULL: never
// expires) when there is none.
func ttlMs(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	return ttl.Milliseconds()
}

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

func describe(job string, slot time.Time) string { return backendutil.DescribeRun(job, slot) }
