package kvlease

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/anarchon/anarchon/backend"
)

// The run limit (backend.RunCounter). A job's counted runs are one key per job,
// count.<job>, changed only by compare-and-set: how many slots were counted and
// the newest countedSlots of them. A first claim that counts (RunClaim.Counts)
// reads it after its late check: a slot not listed when MaxRuns are counted is
// stored finished limit. Otherwise, once the claim's overlap decisions let it run
// (for a job that forbids overlap, after the second look at its other slots), it
// lists its slot and adds one, before its lease key is created (its run record,
// for a job that forbids overlap, or a slot buffered) — a lost race reads and
// decides again. A claim of a slot listed already (a retried claim, a claimer
// that died after counting) does not count it again.
//
// So the count errs high only: a claimer that dies between its count and its
// run record leaves a slot counted that nobody may run (its slot is late by the
// time another claims it, or it is claimed and not counted again while it is
// among the newest countedSlots). It never errs low: no run starts before its
// slot is counted.

var _ backend.RunCounter = (*Store)(nil)

// CountsRuns reports that the store counts runs for RunClaim.MaxRuns.
func (s *Store) CountsRuns() bool { return true }

const countPrefix = "count."

// countedSlots is how many of the newest counted slots the count key lists.
const countedSlots = 64

// countKey is the job's count key.
func countKey(job string) string { return countPrefix + jobToken(job) }

// countRecord is the value of a count key.
type countRecord struct {
	V int `json:"v"`
	// Runs is how many slots were counted.
	Runs int `json:"runs"`
	// Slots are the newest counted slots (Unix ms), oldest first.
	Slots []int64 `json:"slots,omitempty"`
	// LastMS is the slot counted last (slots are not always counted in order).
	LastMS int64 `json:"last_ms,omitempty"`
}

func (r countRecord) lists(ms int64) bool { return slices.Contains(r.Slots, ms) }

// countEntry is a count key's last revision and its value.
type countEntry struct {
	rev uint64
	rec countRecord
}

func (s *Store) readCount(ctx context.Context, b *bucket, job string) (countEntry, error) {
	e, err := s.read(ctx, b, countKey(job))
	if err != nil {
		return countEntry{}, err
	}
	out := countEntry{rev: e.rev, rec: countRecord{V: recordVersion}}
	if !e.put {
		return out, nil
	}
	if err := json.Unmarshal(e.value, &out.rec); err != nil {
		return countEntry{}, fmt.Errorf("kvlease: corrupt count record at revision %d: %w", e.rev, err)
	}
	return out, nil
}

// count returns the job's count key, read once per round.
func (c *claiming) count(ctx context.Context) (countEntry, error) {
	if c.counted != nil {
		return *c.counted, nil
	}
	e, err := c.s.readCount(ctx, c.b, c.in.Job)
	if err != nil {
		return countEntry{}, err
	}
	c.counted = &e
	return e, nil
}

// limited reports whether the claim's slot is to be stored limit: it counts, is
// not listed, and MaxRuns are counted.
func (c *claiming) limited(ctx context.Context) (bool, error) {
	if !c.in.Counts() {
		return false, nil
	}
	e, err := c.count(ctx)
	if err != nil {
		return false, err
	}
	return !e.rec.lists(c.in.Slot.UnixMilli()) && e.rec.Runs >= c.in.MaxRuns, nil
}

// countRun counts the claim's slot, unless it is listed already; limit is true
// when MaxRuns are counted and it is not. A lost race returns an error matching
// errConflict. It sets c.last when the slot is the MaxRuns-th.
func (c *claiming) countRun(ctx context.Context) (limit bool, err error) {
	if !c.in.Counts() {
		return false, nil
	}
	e, err := c.count(ctx)
	if err != nil {
		return false, err
	}
	own := c.in.Slot.UnixMilli()
	if e.rec.lists(own) {
		c.last = e.rec.Runs >= c.in.MaxRuns && e.rec.LastMS == own
		return false, nil
	}
	if e.rec.Runs >= c.in.MaxRuns {
		return true, nil
	}
	next := countRecord{V: recordVersion, Runs: e.rec.Runs + 1, Slots: append(slices.Clone(e.rec.Slots), own), LastMS: own}
	slices.Sort(next.Slots)
	if len(next.Slots) > countedSlots {
		next.Slots = next.Slots[len(next.Slots)-countedSlots:]
	}
	rev, err := c.s.put(ctx, c.b, write{key: countKey(c.in.Job), value: next, expect: e.rev})
	if err != nil {
		c.counted = nil
		return false, err
	}
	c.counted = &countEntry{rev: rev, rec: next}
	c.last = next.Runs == c.in.MaxRuns
	if c.s.died(c.in.Job, c.in.Slot, stepCounted) {
		return false, errDied
	}
	return false, nil
}

// storeLimit stores the slot finished limit, for a claim whose count found the
// limit reached after it created its lease key (purged).
func (c *claiming) storeLimit(ctx context.Context, run runEntry) (backend.ClaimResult, error) {
	c.purgeMine(ctx)
	return c.storeDecision(ctx, run.rev, backend.StatusLimit)
}
