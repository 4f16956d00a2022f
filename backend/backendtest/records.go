package backendtest

import (
	"context"
	"errors"
	"sync"

	"github.com/anarchon/anarchon/backend"
)

// Historian reads a job's history, newest first: a backend.Backend is one.
type Historian interface {
	History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error)
}

// errRecordsDown is what the suite's history answers while it is made to fail.
var errRecordsDown = errors.New("backendtest: the history is down")

// records is the history the suite gives a backend.RecordsUser: every record
// stored once per slot, token and status, as RecordWriter asks, and kept apart,
// so that the suite sees each one (History merges those of one token).
type records struct {
	mu   sync.Mutex
	jobs map[string][]backend.StoredResult
	// fail is how many writes are still to fail.
	fail int
}

var (
	_ backend.RecordWriter = (*records)(nil)
	_ Historian            = (*records)(nil)
)

func newRecords() *records { return &records{jobs: make(map[string][]backend.StoredResult)} }

// WriteRecords stores recs, each once, or fails them all while fail is set.
func (w *records) WriteRecords(ctx context.Context, job string, recs []backend.StoredResult, _ backend.Retention) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail > 0 {
		w.fail--
		return errRecordsDown
	}
	for _, r := range recs {
		if !w.storedLocked(job, r) {
			w.jobs[job] = append(w.jobs[job], r)
		}
	}
	return nil
}

func (w *records) storedLocked(job string, r backend.StoredResult) bool {
	for _, x := range w.jobs[job] {
		if x.Token == r.Token && x.Status == r.Status && x.Slot.Equal(r.Slot) {
			return true
		}
	}
	return false
}

// failNext makes the next n writes fail.
func (w *records) failNext(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = n
}

// History builds the job's history from its records.
func (w *records) History(_ context.Context, job string, limit int) ([]backend.RunRecord, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return backend.BuildHistory(job, nil, w.jobs[job], limit), nil
}

// each returns the job's records one by one, none merged with another.
func (w *records) each(job string) []backend.RunRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []backend.RunRecord
	for _, r := range w.jobs[job] {
		out = append(out, backend.BuildHistory(job, nil, []backend.StoredResult{r}, 1)...)
	}
	return out
}
