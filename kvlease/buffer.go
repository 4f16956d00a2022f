package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/backendutil"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// The buffer overlap policies (backend.OverlapBufferer). A job's buffered slots
// are counted and ordered in one key per job, buffer.<job>, changed only by
// compare-and-set: the list of buffered slots, oldest first, and the marks of its
// runs' stored retries. A buffered slot also has a run record in state buffered
// (no TTL, no lease key). The write order keeps one rule: a slot enters the list
// before its record says buffered, and leaves it before its record says
// anything else. So
//
//   - listed, record buffered: buffered;
//   - listed, no record: buffered (its claimer is between its two writes, or died
//     there); a claim that acts on the entry writes the record first (complete);
//   - not listed, record buffered: a claim took it off the list and is between
//     that and its run record (or died there): the next claim takes it, as a
//     buffered slot first in line;
//   - listed, record in another state: stale (an overlap-allowing claim won a slot
//     whose record was not written yet); dropped by the claim that reads it.
//
// See the package documentation for the transitions and the crash analysis.

var _ backend.OverlapBufferer = (*Store)(nil)

// BuffersOverlap reports that the store implements backend.OverlapBufferOne and
// backend.OverlapBufferAll.
func (s *Store) BuffersOverlap() bool { return true }

const bufferPrefix = "buffer."

// bufferKey is the job's buffer key.
func bufferKey(job string) string { return bufferPrefix + jobToken(job) }

// maxBufferBytes bounds the buffer key's value (the server's default payload
// limit is 1 MiB): a slot that would make it longer is skipped, as at the cap.
const maxBufferBytes = 512 << 10

// bufferRecord is the value of a buffer key.
type bufferRecord struct {
	V int `json:"v"`
	// Slots are the buffered slots, oldest first.
	Slots []queued `json:"slots,omitempty"`
	// Retries mark the slots whose last attempt, claimed under a buffer policy,
	// stored (or is storing) a retry: a lease key is purged at Retry, so that the
	// claims of other slots see the retry here.
	Retries []retryMark `json:"retries,omitempty"`
}

// queued is a buffered slot, for the claim that buffered it.
type queued struct {
	SlotMS   int64  `json:"slot_ms"`
	Token    string `json:"token"`
	Instance string `json:"instance"`
}

// retryMark is a slot whose attempt by Token stores a retry.
type retryMark struct {
	SlotMS int64  `json:"slot_ms"`
	Token  string `json:"token"`
}

func (r bufferRecord) empty() bool { return len(r.Slots) == 0 && len(r.Retries) == 0 }

// find returns the slot ms's entry.
func (r bufferRecord) find(ms int64) (queued, bool) {
	i := slices.IndexFunc(r.Slots, func(q queued) bool { return q.SlotMS == ms })
	if i < 0 {
		return queued{}, false
	}
	return r.Slots[i], true
}

// with returns r with q listed in slot order.
func (r bufferRecord) with(q queued) bufferRecord {
	out := r
	out.Slots = append(slices.Clone(r.Slots), q)
	slices.SortFunc(out.Slots, func(a, b queued) int { return compareInt(a.SlotMS, b.SlotMS) })
	return out
}

// without returns r without the entries of the slots ms.
func (r bufferRecord) without(ms ...int64) bufferRecord {
	out := r
	out.Slots = slices.DeleteFunc(slices.Clone(r.Slots), func(q queued) bool { return slices.Contains(ms, q.SlotMS) })
	return out
}

// withRetry returns r with m as its slot's retry mark.
func (r bufferRecord) withRetry(m retryMark) bufferRecord {
	out := r.withoutRetries(m.SlotMS)
	out.Retries = append(out.Retries, m)
	return out
}

func (r bufferRecord) withoutRetries(ms ...int64) bufferRecord {
	out := r
	out.Retries = slices.DeleteFunc(slices.Clone(r.Retries), func(m retryMark) bool { return slices.Contains(ms, m.SlotMS) })
	return out
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// bufferEntry is a buffer key's last message and its value.
type bufferEntry struct {
	rev uint64
	rec bufferRecord
}

func (s *Store) readBuffer(ctx context.Context, b *bucket, job string) (bufferEntry, error) {
	e, err := s.read(ctx, b, bufferKey(job))
	if err != nil {
		return bufferEntry{}, err
	}
	out := bufferEntry{rev: e.rev, rec: bufferRecord{V: recordVersion}}
	if !e.put {
		return out, nil
	}
	if err := json.Unmarshal(e.value, &out.rec); err != nil {
		return bufferEntry{}, fmt.Errorf("kvlease: corrupt buffer record at revision %d: %w", e.rev, err)
	}
	return out, nil
}

// writeBuffer stores next as job's buffer key by compare-and-set from rev (no
// TTL: it lives while it lists anything), or purges it when next is empty. A
// lost race returns an error matching errConflict.
func (s *Store) writeBuffer(ctx context.Context, b *bucket, job string, rev uint64, next bufferRecord) error {
	if next.empty() {
		if rev == 0 {
			return nil
		}
		return s.purgeAt(ctx, b, bufferKey(job), rev)
	}
	next.V = recordVersion
	_, err := s.put(ctx, b, write{key: bufferKey(job), value: next, expect: rev})
	return err
}

// purgeAt purges key if its last revision is still rev (0: nothing stored),
// waiting for the answer. A lost race returns an error matching errConflict.
func (s *Store) purgeAt(ctx context.Context, b *bucket, key string, rev uint64) error {
	err := s.attempt(ctx, func(ctx context.Context) error {
		_, err := natsutil.Publish(ctx, s.js.Conn(), purgeMsg(b, key, rev, markerTTL, nil))
		return err
	})
	if err != nil {
		if isConflict(err) {
			return fmt.Errorf("%w: %s at revision %d: %w", errConflict, key, rev, err)
		}
		return fmt.Errorf("kvlease: purge %s: %w", key, err)
	}
	return nil
}

// bufferStep names a point between two writes of the buffer policies, where
// bufferHook (tests) may stop a call as if its process died.
type bufferStep string

const (
	stepListed   bufferStep = "listed"   // a slot entered the list, its record not yet buffered
	stepUnlisted bufferStep = "unlisted" // a claim (or a withdrawal) took its slot off the list, its record still buffered
	stepMarked   bufferStep = "marked"   // Retry marked the retry, the run record not yet in state retry
	stepCounted  bufferStep = "counted"  // a claim counted its slot (runlimit.go), its lease key or run record not yet written
)

// errDied is what a call stopped by bufferHook returns.
var errDied = errors.New("kvlease: stopped between two writes (test hook)")

// died reports whether the test hook stops the call at step.
func (s *Store) died(job string, slot time.Time, step bufferStep) bool {
	return s.bufferHook != nil && s.bufferHook(job, slot, string(step))
}

// blocker is another slot that keeps a buffered slot waiting.
type blocker struct {
	ms      int64
	holder  string
	expires time.Time
}

// bufferLook is what a claim under a buffer policy sees of its job: the other
// slots that block (their runs hold a lease, or ended one a moment ago, or are in
// flight before this claim's lease key when mine is set, or wait for a stored
// retry), and the buffer key.
type bufferLook struct {
	blockers []blocker
	buf      bufferEntry
}

// newest is the newest blocker; ok is false without one.
func (l bufferLook) newest() (blocker, bool) {
	if len(l.blockers) == 0 {
		return blocker{}, false
	}
	return slices.MaxFunc(l.blockers, func(a, b blocker) int { return compareInt(a.ms, b.ms) }), true
}

// look reads what blocks the claim's job (busySlots: the lease keys, and with mine
// the claims in flight before it), then the buffer key and the retries it marks,
// in that order: a Retry marks its retry before it purges its lease key, so a
// claim that finds the lease key purged finds the mark.
func (c *claiming) look(ctx context.Context, mine uint64) (bufferLook, error) {
	found, err := c.busySlots(ctx, mine != 0, mine, true)
	if err != nil {
		return bufferLook{}, err
	}
	return c.lookBuffer(ctx, found)
}

// lookBuffer is look with the busy slots found already.
func (c *claiming) lookBuffer(ctx context.Context, found []busy) (bufferLook, error) {
	l := bufferLook{blockers: blockersOf(found)}
	buf, err := c.s.readBuffer(ctx, c.b, c.in.Job)
	if err != nil {
		return l, err
	}
	l.buf = buf
	own := c.in.Slot.UnixMilli()
	var stale []int64
	for _, m := range buf.rec.Retries {
		if m.SlotMS == own {
			continue
		}
		run, err := c.s.readRun(ctx, c.b, keysFor(c.in.Job, time.UnixMilli(m.SlotMS)))
		if err != nil {
			return l, err
		}
		r := run.rec
		switch {
		case r != nil && r.Token == m.Token && r.State == stateRunning:
			// Its Retry is between its mark and its record, or the attempt went
			// on: its lease key says whether it blocks.
		case r != nil && r.Token == m.Token && r.retrying():
			_, by := run.retryWindow()
			closed, err := c.s.pastDeadline(ctx, c.b, by)
			if err != nil {
				return l, err
			}
			if !closed {
				l.blockers = append(l.blockers, blocker{ms: m.SlotMS, holder: r.Instance})
				continue
			}
			stale = append(stale, m.SlotMS)
		default: // finished, forgotten, or taken for the retry
			stale = append(stale, m.SlotMS)
		}
	}
	if len(stale) > 0 {
		// Best effort: a mark left is looked at again by the next claim.
		if c.s.writeBuffer(ctx, c.b, c.in.Job, buf.rev, buf.rec.withoutRetries(stale...)) == nil {
			if l.buf, err = c.s.readBuffer(ctx, c.b, c.in.Job); err != nil {
				return l, err
			}
		}
	}
	return l, nil
}

// firstBuffered decides a first claim under a buffer policy of a slot with no
// run record (ls is the lease key, empty or this token's own claim in flight): a
// slot listed buffered (its record not written yet) is claimed as buffered;
// otherwise, not takeover-only and in time, the slot is stored buffered when
// another slot blocks or is buffered (skipped at the cap), else claimed.
func (c *claiming) firstBuffered(ctx context.Context, run runEntry, ls leaseEntry, sent time.Time) (backend.ClaimResult, error) {
	if ls.rec != nil && c.mine == 0 {
		c.mine = ls.rev // this token's claim in flight
	}
	l, err := c.look(ctx, 0)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	own := c.in.Slot.UnixMilli()
	if _, ok := l.buf.rec.find(own); ok {
		return c.claimBuffered(ctx, run, ls, sent, &l)
	}
	if c.in.TakeoverOnly {
		c.purgeMine(ctx)
		return backend.ClaimResult{Outcome: backend.OutcomeNone}, nil
	}
	late, err := c.s.pastDeadline(ctx, c.b, c.in.Deadline)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	if late {
		c.purgeMine(ctx)
		return c.storeDecision(ctx, run.rev, backend.StatusLate)
	}
	if limit, err := c.limited(ctx); err != nil || limit {
		if err != nil {
			return backend.ClaimResult{}, err
		}
		return c.storeLimit(ctx, run)
	}
	if len(l.blockers) > 0 || len(l.buf.rec.Slots) > 0 {
		c.purgeMine(ctx)
		return c.bufferSlot(ctx, run, l)
	}
	if c.mine != 0 { // resume: the second look, the count, then the run record
		if res, backedOff, err := c.backOff(ctx, run, c.mine); err != nil || backedOff {
			return res, err
		}
		if limit, err := c.countRun(ctx); err != nil || limit {
			if err != nil {
				return backend.ClaimResult{}, err
			}
			return c.storeLimit(ctx, run)
		}
		return c.writeRun(ctx, run, c.mine, ls.expires())
	}
	return c.takeApart(ctx, run, ls)
}

// bufferSlot stores the claim's slot (no run record, read at run) buffered, as
// l saw the job: in the buffer key (compare-and-set), then its run record; or
// skipped when the cap is reached. It answers buffered, waiting for the newest
// blocker, else the oldest earlier buffered slot; with neither (only later slots
// are buffered, and nothing blocks) it claims the slot it buffered at once (a
// lost race: the next round finds it buffered).
func (c *claiming) bufferSlot(ctx context.Context, run runEntry, l bufferLook) (backend.ClaimResult, error) {
	own := c.in.Slot.UnixMilli()
	buf := l.buf
	if _, ok := buf.rec.find(own); ok {
		return backend.ClaimResult{}, fmt.Errorf("%w: the slot is listed buffered", errConflict)
	}
	if len(buf.rec.Slots) >= c.in.Buffers() {
		var err error
		if buf, err = c.dropStale(ctx, buf); err != nil {
			return backend.ClaimResult{}, err
		}
	}
	next := buf.rec.with(queued{SlotMS: own, Token: c.in.Token, Instance: c.in.Instance})
	if len(buf.rec.Slots) >= c.in.Buffers() || encodedLen(next) > maxBufferBytes {
		return c.storeDecision(ctx, run.rev, backend.StatusSkipped)
	}
	// Counted before it is listed: a buffered slot is a decision to run it.
	if limit, err := c.countRun(ctx); err != nil || limit {
		if err != nil {
			return backend.ClaimResult{}, err
		}
		return c.storeDecision(ctx, run.rev, backend.StatusLimit)
	}
	if err := c.s.writeBuffer(ctx, c.b, c.in.Job, buf.rev, next); err != nil {
		return backend.ClaimResult{}, err // a lost race: decide again
	}
	if c.s.died(c.in.Job, c.in.Slot, stepListed) {
		return backend.ClaimResult{}, errDied
	}
	if _, err := c.s.put(ctx, c.b, write{key: c.k.run, value: c.bufferedRecord(queued{SlotMS: own, Token: c.in.Token, Instance: c.in.Instance}), expect: run.rev}); err != nil {
		if errors.Is(err, errConflict) {
			c.unlistIfTaken(ctx)
		}
		return backend.ClaimResult{}, err // completed by another claim, or won at once: decide again
	}
	l.buf = bufferEntry{rec: next}
	if res, ok := l.waitsFor(own); ok {
		res.LimitReached = c.last
		return res, nil
	}
	return backend.ClaimResult{}, fmt.Errorf("%w: nothing keeps the buffered slot waiting", errConflict)
}

// unlistIfTaken takes the claim's slot off the list when its run record, written
// meanwhile, is not buffered (an overlap-allowing claim won the slot between this
// claim's two writes), so that no stale entry is left behind. Best effort: a
// stale entry left is dropped by the claim that reads it.
func (c *claiming) unlistIfTaken(ctx context.Context) {
	run, err := c.s.readRun(ctx, c.b, c.k)
	if err != nil || run.rec == nil || run.rec.buffered() {
		return
	}
	buf, err := c.s.readBuffer(ctx, c.b, c.in.Job)
	if err != nil {
		return
	}
	if _, ok := buf.rec.find(c.in.Slot.UnixMilli()); ok {
		_ = c.s.writeBuffer(ctx, c.b, c.in.Job, buf.rev, buf.rec.without(c.in.Slot.UnixMilli()))
	}
}

// waitsFor answers a claim of buffered slot own that l keeps waiting: buffered,
// waiting for the newest blocker, else the oldest earlier buffered slot; ok is
// false when neither is.
func (l bufferLook) waitsFor(own int64) (backend.ClaimResult, bool) {
	if bl, ok := l.newest(); ok {
		return backend.ClaimResult{Outcome: backend.OutcomeBuffered, Holder: bl.holder, Expires: bl.expires, WaitsFor: time.UnixMilli(bl.ms).UTC()}, true
	}
	for _, q := range l.buf.rec.Slots { // oldest first
		if q.SlotMS < own {
			return backend.ClaimResult{Outcome: backend.OutcomeBuffered, Holder: q.Instance, WaitsFor: time.UnixMilli(q.SlotMS).UTC()}, true
		}
	}
	return backend.ClaimResult{}, false
}

// bufferedRecord is the run record of q's slot stored buffered for q's token
// and instance.
func (c *claiming) bufferedRecord(q queued) runRecord {
	return runRecord{
		V: recordVersion, Job: c.in.Job, SlotMS: q.SlotMS, Token: q.Token, Instance: q.Instance,
		Attempt: 1, Buffer: true, State: stateBuffered, LeaseMS: c.lease.Milliseconds(), KeepMS: c.keepMS, Last: c.last,
	}
}

func encodedLen(r bufferRecord) int {
	data, _ := json.Marshal(r)
	return len(data)
}

// maxStaleChecks bounds the entries a claim at the cap checks for staleness: a
// stale entry is rare (buffer.go), and one deeper in the list is checked when it
// comes near the head.
const maxStaleChecks = 4

// dropStale reads the run records of buf's oldest entries (maxStaleChecks) and
// drops the stale ones (a record in a state other than buffered) by
// compare-and-set; a lost race returns an error matching errConflict.
func (c *claiming) dropStale(ctx context.Context, buf bufferEntry) (bufferEntry, error) {
	var stale []int64
	for _, q := range buf.rec.Slots[:min(len(buf.rec.Slots), maxStaleChecks)] {
		run, err := c.s.readRun(ctx, c.b, keysFor(c.in.Job, time.UnixMilli(q.SlotMS)))
		if err != nil {
			return buf, err
		}
		if run.rec != nil && !run.rec.buffered() {
			stale = append(stale, q.SlotMS)
		}
	}
	if len(stale) == 0 {
		return buf, nil
	}
	next := buf.rec.without(stale...)
	if err := c.s.writeBuffer(ctx, c.b, c.in.Job, buf.rev, next); err != nil {
		return buf, err
	}
	return c.s.readBuffer(ctx, c.b, c.in.Job)
}

// claimBuffered decides a claim of a buffered slot (its record buffered, or
// listed without a record: run.rec nil), from the lease key ls. Another token's
// live lease is a claim taking it: running. Unless the claim allows overlap, it
// waits (buffered) while another slot blocks or an earlier slot is buffered;
// otherwise it takes the slot as a first claim: its lease key (for a job that
// forbids overlap, then the second look of overlap.go), the slot off the list,
// then the run record (attempt 1, a new fence). l is the claim's look when made
// already.
func (c *claiming) claimBuffered(ctx context.Context, run runEntry, ls leaseEntry, sent time.Time, l *bufferLook) (backend.ClaimResult, error) {
	if ls.rec != nil && ls.rec.Token != c.in.Token {
		return c.running(run, ls, sent), nil
	}
	if ls.rec != nil && c.mine == 0 {
		c.mine = ls.rev // this token's claim in flight
	}
	own := c.in.Slot.UnixMilli()
	allow := c.in.Overlap == backend.OverlapAllow
	if l == nil {
		var look bufferLook
		var err error
		if allow {
			look.buf, err = c.s.readBuffer(ctx, c.b, c.in.Job)
		} else {
			look, err = c.look(ctx, 0)
		}
		if err != nil {
			return backend.ClaimResult{}, err
		}
		l = &look
	}
	entry, listed := l.buf.rec.find(own)
	if run.rec == nil && !listed {
		return backend.ClaimResult{}, fmt.Errorf("%w: the slot is no longer listed buffered", errConflict)
	}
	if !allow {
		if len(l.blockers) == 0 && listed {
			if err := c.checkEarlier(ctx, l.buf, own); err != nil {
				return backend.ClaimResult{}, err
			}
		}
		if !listed {
			// Taken off the list by a claim that died before its run record:
			// first in line, it waits only for what blocks.
			l.buf.rec.Slots = nil
		}
		if res, ok := l.waitsFor(own); ok {
			c.purgeMine(ctx)
			if err := c.complete(ctx, run, entry, listed); err != nil {
				return backend.ClaimResult{}, err
			}
			res.LimitReached = run.rec != nil && run.rec.Last
			return res, nil
		}
	}
	expires := ls.expires()
	if c.mine == 0 {
		if c.s.overlapHook != nil && !allow {
			c.s.overlapHook(c.in.Job, c.in.Slot, false)
		}
		rev, err := c.s.put(ctx, c.b, c.leaseWrite(ls.rev))
		if err != nil {
			return backend.ClaimResult{}, err
		}
		c.mine, expires = rev, c.s.clock.estimate(time.Now()).Add(c.lease)
	}
	if !allow {
		if c.s.overlapHook != nil {
			c.s.overlapHook(c.in.Job, c.in.Slot, true)
		}
		found, err := c.busySlots(ctx, true, c.mine, true)
		if err != nil {
			return backend.ClaimResult{}, err
		}
		if len(found) > 0 {
			c.purgeMine(ctx)
			if err := c.complete(ctx, run, entry, listed); err != nil {
				return backend.ClaimResult{}, err
			}
			res, _ := bufferLook{blockers: blockersOf(found)}.waitsFor(own)
			res.LimitReached = run.rec != nil && run.rec.Last
			return res, nil
		}
	}
	if listed {
		if err := c.s.writeBuffer(ctx, c.b, c.in.Job, l.buf.rev, l.buf.rec.without(own)); err != nil {
			return backend.ClaimResult{}, err // a lost race: decide again, keeping the lease key
		}
		if c.s.died(c.in.Job, c.in.Slot, stepUnlisted) {
			return backend.ClaimResult{}, errDied
		}
	}
	next, err := c.nextRun(ctx, nil)
	if err != nil {
		return backend.ClaimResult{}, err
	}
	next.Last = run.rec != nil && run.rec.Last
	runRev, err := c.s.put(ctx, c.b, c.runWrite(next, run.rev))
	if err != nil {
		return backend.ClaimResult{}, err // withdrawn, or completed meanwhile: decide again
	}
	return c.won(c.mine, runRev, next, expires), nil
}

// checkEarlier looks at the run record of the oldest slot listed in buf, when it
// is earlier than own (the slot a claim of own would wait for): with none (its
// claimer between its two writes, or dead there) it stores it buffered before
// the claim waits for it, so that Active lists it; a stale one (its record in
// another state) it drops, and the claim decides again (an error matching
// errConflict, as for a lost race).
func (c *claiming) checkEarlier(ctx context.Context, buf bufferEntry, own int64) error {
	if len(buf.rec.Slots) == 0 || buf.rec.Slots[0].SlotMS >= own {
		return nil
	}
	q := buf.rec.Slots[0]
	k := keysFor(c.in.Job, time.UnixMilli(q.SlotMS))
	earlier, err := c.s.readRun(ctx, c.b, k)
	switch {
	case err != nil:
		return err
	case earlier.rec == nil:
		_, err := c.s.put(ctx, c.b, write{key: k.run, value: c.bufferedRecord(q), expect: earlier.rev})
		return err
	case !earlier.rec.buffered():
		if err := c.s.writeBuffer(ctx, c.b, c.in.Job, buf.rev, buf.rec.without(q.SlotMS)); err != nil {
			return err
		}
		return fmt.Errorf("%w: a stale buffered slot dropped", errConflict)
	}
	return nil
}

// complete writes the run record of a slot listed buffered without one (entry,
// its claimer between its two writes, or dead), so that the slot is stored
// buffered before the claim answers so. A lost race returns an error matching
// errConflict.
func (c *claiming) complete(ctx context.Context, run runEntry, entry queued, listed bool) error {
	if run.rec != nil || !listed {
		return nil
	}
	_, err := c.s.put(ctx, c.b, write{key: c.k.run, value: c.bufferedRecord(entry), expect: run.rev})
	return err
}

// blockersOf turns the busy slots busySlots found into blockers.
func blockersOf(found []busy) []blocker {
	var out []blocker
	for _, o := range found {
		bl := blocker{ms: o.ms}
		switch {
		case o.ls.rec != nil:
			bl.holder, bl.expires = o.ls.rec.Instance, o.ls.expires()
		case o.run.rec != nil:
			bl.holder = o.run.rec.Instance
		}
		out = append(out, bl)
	}
	return out
}

// withdraw ends a buffered slot for the token that buffered it (Finish): off the
// list, then its run record finished with status (compare-and-set from run, read
// buffered), then a purge of its lease key, left without a live lease, so that
// the watches of the slot fire.
func (s *Store) withdraw(ctx context.Context, b *bucket, k runKeys, key backend.RunKey, run runEntry, status backend.Status) error {
	ms := key.Slot.UnixMilli()
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		if try > 0 {
			var err error
			if run, err = s.readRun(ctx, b, k); err != nil {
				return err
			}
			switch {
			case run.rec == nil || run.rec.Token != key.Token:
				return fmt.Errorf("%w: %s", backend.ErrStaleToken, backendutil.DescribeRun(key.Job, key.Slot))
			case run.rec.finished():
				return nil
			case !run.rec.buffered():
				return fmt.Errorf("%w: %s", backend.ErrStaleToken, backendutil.DescribeRun(key.Job, key.Slot))
			}
		}
		buf, err := s.readBuffer(ctx, b, key.Job)
		if err != nil {
			return err
		}
		if _, ok := buf.rec.find(ms); ok {
			if err := s.writeBuffer(ctx, b, key.Job, buf.rev, buf.rec.without(ms)); err != nil {
				if errors.Is(err, errConflict) {
					continue
				}
				return err
			}
			if s.died(key.Job, key.Slot, stepUnlisted) {
				return errDied
			}
		}
		next := *run.rec
		next.State, next.Status = stateFinished, status
		keep := keepFor(time.Duration(next.KeepMS)*time.Millisecond, time.Duration(next.LeaseMS)*time.Millisecond, true)
		if _, err := s.put(ctx, b, write{key: k.run, value: next, expect: run.rev, ttl: keep}); err != nil {
			if errors.Is(err, errConflict) {
				continue // taken meanwhile (first in line), or a repeat
			}
			return err
		}
		return s.touchLease(ctx, b, k)
	}
	return ErrContention
}

// touchLease purges k's lease key while it holds no live lease, so that the
// watches of a buffered slot fire (best effort: a live lease's write fired them).
func (s *Store) touchLease(ctx context.Context, b *bucket, k runKeys) error {
	for try := 0; try < 3; try++ {
		ls, err := s.readLease(ctx, b, k)
		if err != nil || ls.rec != nil {
			return err
		}
		if err := s.purgeAt(ctx, b, k.lease, ls.rev); !errors.Is(err, errConflict) {
			return err
		}
	}
	return nil
}

// markRetry marks, in job's buffer key, that token's attempt of slot stores a
// retry (Retry of a run claimed under a buffer policy), before the run record
// says so.
func (s *Store) markRetry(ctx context.Context, b *bucket, job string, slot time.Time, token string) error {
	m := retryMark{SlotMS: slot.UnixMilli(), Token: token}
	for try := 0; try < maxTries; try++ {
		if err := backoff(ctx, try); err != nil {
			return err
		}
		buf, err := s.readBuffer(ctx, b, job)
		if err != nil {
			return err
		}
		if slices.Contains(buf.rec.Retries, m) {
			return nil
		}
		err = s.writeBuffer(ctx, b, job, buf.rev, buf.rec.withRetry(m))
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return ErrContention
}
