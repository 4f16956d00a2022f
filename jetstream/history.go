package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// History returns the job's newest runs from all instances, newest first, at most
// limit of them, merged with backend.BuildHistory. It never returns more runs than
// the job's history size (the stream's per-subject limit), whatever limit says:
// scheduled claims are stored for the duplicate window and may outlive the results
// the history size keeps. A run whose history TTL has passed is not shown, even while
// its claim is still stored for the window.
//
// It asks for the stream's state (one request: first and last sequence, the
// server's clock). It then reads the stream backwards from its last message in
// windows that double. Each window is ONE direct get request for all of the job's
// messages in it (a batch read, nats-server ≥ 2.11). It stops when it holds limit
// runs whose claims it has seen, or after 4*limit+32 messages, or at the start of
// the stream. A history of up to about limit runs with one claim and one result
// each is three requests. The first window is read at the same time as the state
// is asked for, from the last sequence this Backend has seen (its own publishes,
// its last History). What the state then shows past that read is read after it.
// A read that does not fit the state is not used. So a History that follows
// the Backend's own writes, or another History, costs two requests sent together:
// one round trip. A stream that answers no direct gets (set up by an older
// release, or not by anarchon) is read one message at a time from the leader, as
// before. Runs are found by arrival: a slot claimed much later than newer slots
// (catch-up) may be missed when limit is small.
//
// Direct gets may be answered by any replica of the stream. On a replicated stream
// that includes a follower a few milliseconds behind the leader. History may then
// miss the newest record, or show a run as running that has just finished. That is the
// nature of a history read taken a moment earlier, and History decides nothing;
// every read that decides a claim goes to the stream leader.
//
// A run with leases is one record per attempt. The first attempt's claim is the
// slot's claim (LeasedBackend.RecordClaim); a takeover's is on the lease subject.
// Each carries the attempt's own token, which its result carries too. A claim
// stored twice (a retried write) is one record.
//
// A message on the job's subjects that is not an anarchon record (foreign, corrupt,
// for another job) is skipped, logged at warn level and counted in SkippedRecords.
func (b *Backend) History(ctx context.Context, job string, limit int) ([]backend.RunRecord, error) {
	ctx, cancel := b.callContext(ctx)
	defer cancel()
	st, err := b.lookup(ctx, job)
	if errors.Is(err, errNoStream) {
		return []backend.RunRecord{}, nil // a job that never ran
	}
	if err != nil {
		return nil, err
	}
	// The first window is read while the stream's state is asked for, from the
	// last sequence this backend has seen (see ahead); what the state shows the
	// guess missed is read after it.
	ahead := b.readAhead(ctx, st, limit)
	defer ahead.wait()
	info, err := st.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: history of job %q: stream %q: %w", job, st.names.stream, err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	st.sawSeq(last)
	if info.State.Msgs == 0 || last == 0 {
		return []backend.RunRecord{}, nil
	}
	first = max(first, 1)

	// The history size caps what History shows: claims outlive their results when
	// the duplicate window is longer than it takes to store size newer results.
	if size := info.Config.MaxMsgsPerSubject; size > 0 && (limit <= 0 || int64(limit) > size) {
		limit = int(size)
	}
	now := info.TimeStamp
	if now.IsZero() {
		now = time.Now()
	}
	span := uint64(2*max(limit, 0) + 8)
	// The first window is usually all that is read, about half claims and half
	// results: room for them at once rather than in growing copies.
	room := min(span, info.State.Msgs)/2 + 1
	h := &historyScan{job: job, now: now, size: info.Config.MaxMsgsPerSubject,
		claims:  make([]backend.ClaimRecord, 0, room),
		results: make([]backend.StoredResult, 0, room),
		claimed: make(map[string]bool, room),
	}
	hi := last
	for round := 0; ; round++ {
		lo := first
		if limit > 0 && hi-first+1 > span {
			lo = hi - span + 1
		}
		var from, to uint64
		ok := false
		if round == 0 {
			// The window read ahead, when it started no later than lo: with the
			// messages after it, read now, the first window is [from, hi], at
			// least [lo, hi]. Oldest first, as scan adds them.
			from, to, ok = ahead.use(first, last, lo)
		}
		if ok {
			for _, m := range ahead.msgs {
				b.scanned(st, m, h)
			}
			lo = from
		} else {
			to = lo - 1
		}
		if to < hi {
			if err := b.scan(ctx, st, to+1, hi, h); err != nil {
				return nil, fmt.Errorf("jetstream: history of job %q: stream %q: %w", job, st.names.stream, err)
			}
		}
		if lo <= first {
			break
		}
		if recs, ok := h.enough(limit); ok {
			return recs, nil
		}
		hi, span = lo-1, span*2
	}
	return h.build(limit), nil
}

// scan reads the job's messages with sequences in [lo, hi] into h: in one direct
// get request when the stream allows them, else one leader read per message.
func (b *Backend) scan(ctx context.Context, st *jobStream, lo, hi uint64, h *historyScan) error {
	if st.direct.Load() && st.entries != "" && h.entryRecords > h.scanned {
		return b.scanOwn(ctx, st, lo, hi, h)
	}
	if st.direct.Load() {
		msgs, err := b.direct.Batch(ctx, st.names.stream, natsutil.GetRequest{
			Seq: lo, NextFor: st.all, Batch: int(min(hi-lo+1, maxDirectBatch)),
		})
		switch {
		case err == nil:
			last := lo
			for _, m := range msgs {
				if m.Sequence > hi {
					return nil
				}
				b.scanned(st, m, h)
				last = m.Sequence
			}
			if len(msgs) < maxDirectBatch || last >= hi {
				return nil
			}
			return b.scan(ctx, st, last+1, hi, h)
		case errors.Is(err, natsutil.ErrNoDirect):
			// Direct gets turned off meanwhile (an older release updated the stream
			// during a rolling upgrade): read from the leader.
			st.direct.Store(false)
		default:
			return err
		}
	}
	for seq := lo; seq <= hi; {
		m, err := natsutil.LeaderGet(ctx, b.js, st.names.stream, seq, st.all)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if m.Sequence > hi || m.Sequence < seq {
			return nil
		}
		b.scanned(st, m, h)
		seq = m.Sequence + 1
	}
	return nil
}

// scanOwn is scan for a job whose stream holds mostly its entries' records: it
// reads the job's own subjects only (<prefix>.<token>.* and its claims,
// <prefix>.<token>.claim.*; an entry's are deeper), one direct get batch per
// filter, merged in stream order.
func (b *Backend) scanOwn(ctx context.Context, st *jobStream, lo, hi uint64, h *historyScan) error {
	var msgs []*natsjs.RawStreamMsg
	for _, filter := range []string{strings.TrimSuffix(st.all, ">") + "*", st.claims + ".*"} {
		for seq := lo; seq <= hi; {
			batch, err := b.direct.Batch(ctx, st.names.stream, natsutil.GetRequest{
				Seq: seq, NextFor: filter, Batch: int(min(hi-seq+1, maxDirectBatch)),
			})
			if errors.Is(err, natsutil.ErrNoDirect) {
				st.direct.Store(false) // see scan: read from the leader
				return b.scan(ctx, st, lo, hi, h)
			}
			if err != nil {
				return err
			}
			for _, m := range batch {
				if m.Sequence <= hi {
					msgs = append(msgs, m)
				}
			}
			if len(batch) < maxDirectBatch || batch[len(batch)-1].Sequence >= hi {
				break
			}
			seq = batch[len(batch)-1].Sequence + 1
		}
	}
	slices.SortFunc(msgs, func(x, y *natsjs.RawStreamMsg) int { return cmp.Compare(x.Sequence, y.Sequence) })
	for _, m := range msgs {
		b.scanned(st, m, h)
	}
	return nil
}

// ahead is History's first window, read from the last sequence the backend saw
// while the stream's state was asked for.
type ahead struct {
	done chan struct{}
	from uint64 // the first sequence asked for
	msgs []*natsjs.RawStreamMsg
	err  error
}

// readAhead starts reading the window of limit runs that ends at the last sequence
// st has seen, when there is one and the stream answers direct gets; a nil ahead
// otherwise. The read asks for a quarter of a window more, for what other
// instances stored since.
func (b *Backend) readAhead(ctx context.Context, st *jobStream, limit int) *ahead {
	seen := st.lastSeq.Load()
	span := uint64(2*max(limit, 0) + 8)
	if seen == 0 || limit <= 0 || !st.direct.Load() || span+span/4 > maxDirectBatch {
		return nil
	}
	a := &ahead{done: make(chan struct{}), from: 1}
	if seen > span {
		a.from = seen - span + 1
	}
	go func() {
		defer close(a.done)
		a.msgs, a.err = b.direct.Batch(ctx, st.names.stream, natsutil.GetRequest{
			Seq: a.from, NextFor: st.all, Batch: int(span + span/4),
		})
	}()
	return a
}

// wait waits for the read to end (a nil ahead has none).
func (a *ahead) wait() {
	if a != nil {
		<-a.done
	}
}

// use waits for the read and reports whether it can stand for the first window of
// a stream holding [first, last] whose window would start at lo. It can when it
// read without error, from no later than lo, some of the stream's messages up to
// last. It then
// holds every message of the job in [from, to], the sequences it returns; messages
// stored after the stream's state was taken are dropped.
func (a *ahead) use(first, last, lo uint64) (from, to uint64, ok bool) {
	if a == nil {
		return 0, 0, false
	}
	<-a.done
	msgs := a.msgs
	for len(msgs) > 0 && msgs[len(msgs)-1].Sequence > last {
		msgs = msgs[:len(msgs)-1]
	}
	if a.err != nil || a.from > lo || len(msgs) == 0 {
		return 0, 0, false
	}
	a.msgs = msgs
	return max(a.from, first), msgs[len(msgs)-1].Sequence, true
}

// maxDirectBatch bounds one direct get request of History.
const maxDirectBatch = 1024

// scanned adds one read message to h, skipping (and counting) what is not ours.
func (b *Backend) scanned(st *jobStream, m *natsjs.RawStreamMsg, h *historyScan) {
	if st.entries != "" && strings.HasPrefix(m.Subject, st.entries+".") {
		h.entryRecords++ // one of the job's entries' records: its history, not the job's
		return
	}
	h.scanned++
	if err := h.add(st, m); err != nil {
		b.skipped.Add(1)
		b.cfg.log.Warn("jetstream: skipping a message that is not an anarchon record",
			"stream", st.names.stream, "job", st.job, "subject", m.Subject, "seq", m.Sequence, "error", err)
	}
}

// historyScan collects the records History has read.
type historyScan struct {
	job     string
	size    int64     // the job's history size (the results subject's limit), 0: none
	now     time.Time // the server's clock when the scan started
	claims  []backend.ClaimRecord
	results []backend.StoredResult
	// claimSeq is the stream sequence of each claim; firstResult the lowest
	// sequence of a result read (0: none yet).
	claimSeq    []uint64
	firstResult uint64
	claimed     map[string]bool // tokens whose claim was read
	scanned     int
	// entryRecords counts the job's entries' records read and passed over:
	// once they outnumber the job's own, scan reads the job's subjects only.
	entryRecords int
}

func (h *historyScan) add(st *jobStream, m *natsjs.RawStreamMsg) error {
	if m.Header.Get(natsjs.MarkerReasonHeader) != "" {
		return nil // a server delete marker (streams with subject delete markers)
	}
	switch kind := st.kindOf(m.Subject); kind {
	case kindClaim, kindManual, kindLease:
		c, ttl, err := decodeClaim(h.job, kind, m.Data)
		if err != nil {
			return err
		}
		if ttl > 0 && h.now.Sub(m.Time) > ttl {
			return nil // still stored for the duplicate window, gone from history
		}
		h.claims = append(h.claims, c)
		h.claimSeq = append(h.claimSeq, m.Sequence)
		h.claimed[c.Token] = true
	case kindResult:
		r, err := decodeResult(h.job, m.Data)
		if err != nil {
			return err
		}
		h.results = append(h.results, r)
		if h.firstResult == 0 || m.Sequence < h.firstResult {
			h.firstResult = m.Sequence
		}
	default:
		return errNotOurs
	}
	return nil
}

// build merges what the scan read into History's records. Once the scan has read
// as many results as the job keeps (the results subject is full), some claims are
// left out. These are the claims with no result that were stored before every
// result kept. Such a claim's result, if it had one, was dropped for newer ones (a
// result written twice, a lost note beside a late result). So the run is past the
// history the job keeps, not running.
func (h *historyScan) build(limit int) []backend.RunRecord {
	claims := h.claims
	if h.size > 0 && int64(len(h.results)) >= h.size {
		claims = make([]backend.ClaimRecord, 0, len(h.claims))
		for i, c := range h.claims {
			if !h.beforeResults(i) {
				claims = append(claims, c)
			}
		}
	}
	return backend.BuildHistory(h.job, claims, h.results, limit)
}

// beforeResults reports whether claim i has no result read and was stored before
// every result read.
func (h *historyScan) beforeResults(i int) bool {
	if h.firstResult == 0 || h.claimSeq[i] > h.firstResult {
		return false
	}
	tok := h.claims[i].Token
	for _, r := range h.results {
		if r.Token == tok {
			return false
		}
	}
	return true
}

// unsure reports whether a claim with no result, stored before every result read,
// is in recs while fewer results were read than the job keeps. Its result may be
// among those not read yet, or dropped for newer ones. Only reading the whole
// result subject tells which (build).
func (h *historyScan) unsure(recs []backend.RunRecord) bool {
	if h.size <= 0 || int64(len(h.results)) >= h.size || h.firstResult == 0 {
		return false
	}
	shown := make(map[string]bool, len(recs))
	for _, r := range recs {
		if r.Status == backend.StatusRunning {
			shown[r.Token] = true
		}
	}
	for i, c := range h.claims {
		if shown[c.Token] && h.beforeResults(i) {
			return true
		}
	}
	return false
}

// enough reports whether the newest limit runs are known with their claims, or the
// scan has read so much that older claims are not worth looking for, and returns
// them when they are (History's answer: no second merge).
func (h *historyScan) enough(limit int) ([]backend.RunRecord, bool) {
	if limit <= 0 {
		return nil, false
	}
	recs := h.build(limit)
	if len(recs) < limit || h.unsure(recs) {
		return nil, false
	}
	if h.scanned >= 4*limit+32 {
		return recs, true
	}
	for _, r := range recs {
		// A judgement (a deadline record) is a result that never has a claim.
		if r.Token != "" && !h.claimed[r.Token] && !r.Status.Judgement() {
			return nil, false
		}
	}
	return recs, true
}
