package natsutil

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The answers EnsureStream must treat as "ask again" come from real servers only by
// chance (a cluster electing its leaders, a concurrent instance), so these tests
// script them: scripted answers one request at a time, the stream's configuration
// otherwise. The integration tests (integration/firststart_test.go) meet the real
// ones on fresh clusters.

// scripted answers the requests of EnsureStream from a script, then from cfg.
type scripted struct {
	cfg     *jetstream.StreamConfig    // the stream, nil while there is none
	script  map[string][]error         // per request kind, the errors to answer first
	apply   func(op string, err error) // runs when a scripted error is answered (optional)
	sent    []string                   // every request, in order
	updates []jetstream.StreamConfig   // the updates that were applied
}

func (s *scripted) next(op string) error {
	s.sent = append(s.sent, op)
	if q := s.script[op]; len(q) > 0 {
		s.script[op] = q[1:]
		if s.apply != nil {
			s.apply(op, q[0])
		}
		return q[0]
	}
	return nil
}

func (s *scripted) Stream(_ context.Context, _ string) (jetstream.Stream, error) {
	if err := s.next("info"); err != nil {
		return nil, err
	}
	if s.cfg == nil {
		return nil, jetstream.ErrStreamNotFound
	}
	return info(*s.cfg), nil
}

func (s *scripted) CreateStream(_ context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := s.next("create"); err != nil {
		return nil, err
	}
	if s.cfg != nil {
		return nil, jetstream.ErrStreamNameAlreadyInUse
	}
	s.cfg = &cfg
	return info(cfg), nil
}

func (s *scripted) UpdateStream(_ context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := s.next("update"); err != nil {
		return nil, err
	}
	s.cfg = &cfg
	s.updates = append(s.updates, cfg)
	return info(cfg), nil
}

type infoStream struct {
	jetstream.Stream
	info *jetstream.StreamInfo
}

func (s infoStream) CachedInfo() *jetstream.StreamInfo { return s.info }

func info(cfg jetstream.StreamConfig) jetstream.Stream {
	return infoStream{info: &jetstream.StreamInfo{Config: cfg}}
}

func apiErr(code jetstream.ErrorCode) error {
	return &jetstream.APIError{Code: 503, ErrorCode: code, Description: "scripted"}
}

// setup wants 3 replicas; anything else it updates.
func setup() StreamSetup {
	return StreamSetup{
		Config: jetstream.StreamConfig{Name: "S", Replicas: 3},
		Reconcile: func(have jetstream.StreamConfig) (jetstream.StreamConfig, []string, error) {
			var c Changes
			c.Set("num_replicas", have.Replicas != 3, func() { have.Replicas = 3 })
			return have, c, nil
		},
	}
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEnsureStream(t *testing.T) {
	noLeader, inUse, busy := apiErr(ErrCodeClusterNotAvailable), apiErr(ErrCodeStreamNameInUse), apiErr(ErrCodeReconfigureInProgress)
	for _, tc := range []struct {
		name    string
		have    *jetstream.StreamConfig
		script  map[string][]error
		sent    []string
		created bool
		changes []string
		retries int
	}{
		{
			name: "matching stream: one read, no update",
			have: &jetstream.StreamConfig{Name: "S", Replicas: 3},
			sent: []string{"info"},
		},
		{
			name: "no stream: create, then confirm",
			sent: []string{"info", "create", "info"}, created: true,
		},
		{
			name: "older stream: update, then confirm",
			have: &jetstream.StreamConfig{Name: "S", Replicas: 1},
			sent: []string{"info", "update", "info"}, changes: []string{"num_replicas"},
		},
		{
			name:   "no leader yet, no responders, timeouts: asked again",
			script: map[string][]error{"info": {nats.ErrNoResponders, noLeader, context.DeadlineExceeded}, "create": {nats.ErrTimeout}},
			sent:   []string{"info", "info", "info", "info", "create", "info", "create", "info"}, created: true, retries: 4,
		},
		{
			name:   "name in use from a concurrent create: read again",
			script: map[string][]error{"create": {inUse}},
			sent:   []string{"info", "create", "info", "create", "info"}, created: true, retries: 1,
		},
		{
			name:   "too few peers online yet (a cluster forming its routes): asked again",
			script: map[string][]error{"create": {apiErr(ErrCodeNoPlacement)}},
			sent:   []string{"info", "create", "info", "create", "info"}, created: true, retries: 1,
		},
		{
			name:   "update refused while another is in flight, or unanswered: read again",
			have:   &jetstream.StreamConfig{Name: "S", Replicas: 1},
			script: map[string][]error{"update": {busy, context.DeadlineExceeded}},
			sent:   []string{"info", "update", "info", "update", "info", "update", "info"}, changes: []string{"num_replicas"}, retries: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &scripted{cfg: tc.have, script: tc.script}
			if srv.script == nil {
				srv.script = map[string][]error{}
			}
			res, err := EnsureStream(ctx(t), srv, setup())
			require.NoError(t, err)
			assert.Equal(t, tc.sent, srv.sent)
			assert.Equal(t, tc.created, res.Created)
			assert.Equal(t, tc.changes, res.Changes)
			assert.Equal(t, tc.retries, res.Retries)
			require.NotNil(t, res.Stream)
			assert.Equal(t, 3, res.Stream.CachedInfo().Config.Replicas, "the confirmed configuration")
		})
	}
}

// An update that timed out may have been applied: the next read shows it, and no
// second update is sent.
func TestEnsureStreamUnansweredUpdateThatWasApplied(t *testing.T) {
	srv := &scripted{cfg: &jetstream.StreamConfig{Name: "S", Replicas: 1}, script: map[string][]error{"update": {context.DeadlineExceeded}}}
	srv.apply = func(op string, _ error) {
		if op == "update" {
			srv.cfg.Replicas = 3 // applied, the answer lost
		}
	}
	res, err := EnsureStream(ctx(t), srv, setup())
	require.NoError(t, err)
	assert.Equal(t, []string{"info", "update", "info"}, srv.sent)
	assert.Empty(t, srv.updates)
	assert.Equal(t, 1, res.Retries)
}

func TestEnsureStreamDefiniteErrors(t *testing.T) {
	refused := apiErr(10047) // insufficient resources: an answer
	for _, tc := range []struct {
		name   string
		have   *jetstream.StreamConfig
		script map[string][]error
		sent   []string
	}{
		{"read", nil, map[string][]error{"info": {refused}}, []string{"info"}},
		{"create", nil, map[string][]error{"create": {refused}}, []string{"info", "create"}},
		{"update", &jetstream.StreamConfig{Name: "S"}, map[string][]error{"update": {refused}}, []string{"info", "update"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &scripted{cfg: tc.have, script: tc.script}
			_, err := EnsureStream(ctx(t), srv, setup())
			require.ErrorIs(t, err, refused)
			assert.Equal(t, tc.sent, srv.sent, "no retry")
		})
	}

	t.Run("reconcile refuses", func(t *testing.T) {
		bad := errors.New("cannot use it")
		s := setup()
		s.Reconcile = func(have jetstream.StreamConfig) (jetstream.StreamConfig, []string, error) { return have, nil, bad }
		_, err := EnsureStream(ctx(t), &scripted{cfg: &jetstream.StreamConfig{Name: "S"}, script: map[string][]error{}}, s)
		assert.ErrorIs(t, err, bad)
	})

	t.Run("check refuses what the server answered", func(t *testing.T) {
		old := errors.New("server too old")
		s := setup()
		s.Check = func(jetstream.StreamConfig) error { return old }
		_, err := EnsureStream(ctx(t), &scripted{script: map[string][]error{}}, s)
		assert.ErrorIs(t, err, old)
	})
}

// Something that changes the stream back after every update (instances configured
// differently) ends the setup after a few updates, not at the deadline.
func TestEnsureStreamStopsFightingAnotherWriter(t *testing.T) {
	srv := &scripted{cfg: &jetstream.StreamConfig{Name: "S", Replicas: 1}, script: map[string][]error{}}
	start := time.Now()
	_, err := EnsureStream(ctx(t), fighting{srv}, setup())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "configured differently")
	assert.Len(t, srv.updates, maxUpdates)
	assert.Less(t, time.Since(start), time.Second)
}

// fighting is a server where another writer sets the replicas back to 1 after every
// update.
type fighting struct{ *scripted }

func (f fighting) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := f.scripted.UpdateStream(ctx, cfg)
	back := *f.cfg
	back.Replicas = 1
	f.cfg = &back
	return st, err
}

// Without an answer until the deadline, the error says what was asked last and
// matches both the request's error and the deadline.
func TestEnsureStreamDeadline(t *testing.T) {
	noLeader := apiErr(ErrCodeClusterNotAvailable)
	many := make([]error, 1000)
	for i := range many {
		many[i] = noLeader
	}
	c, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res, err := EnsureStream(c, &scripted{script: map[string][]error{"info": many}}, setup())
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, noLeader)
	assert.Contains(t, err.Error(), "to read")
	assert.Positive(t, res.Retries)
}

func TestCompareLayout(t *testing.T) {
	for _, tc := range []struct {
		have string
		set  bool
		want Layout
	}{
		{set: false, want: LayoutOlder},
		{have: "", set: true, want: LayoutOlder},
		{have: "0", set: true, want: LayoutOlder},
		{have: "x", set: true, want: LayoutOlder},
		{have: "1", set: true, want: LayoutSame},
		{have: " 1", set: true, want: LayoutSame},
		{have: "2", set: true, want: LayoutNewer},
		{have: "10", set: true, want: LayoutNewer}, // a number, not a string: "10" < "9"
	} {
		meta := map[string]string{"other": "x"}
		if tc.set {
			meta[LayoutKey] = tc.have
		}
		assert.Equal(t, tc.want, CompareLayout(meta, "1"), "layout %q (set %v)", tc.have, tc.set)
	}
	assert.Equal(t, LayoutOlder, CompareLayout(map[string]string{LayoutKey: "9"}, "10"))
}

func TestMetadata(t *testing.T) {
	want := map[string]string{LayoutKey: "1", "anarchon.job": "j"}
	have := map[string]string{LayoutKey: "1", "anarchon.job": "j", "_nats.ver": "2.15.3"}
	assert.False(t, MetadataLacks(have, want), "the server's own entries do not count")
	assert.True(t, MetadataLacks(nil, want))
	assert.True(t, MetadataLacks(map[string]string{LayoutKey: "0", "anarchon.job": "j"}, want))
	merged := MergeMetadata(map[string]string{LayoutKey: "0", "team": "x"}, want)
	assert.Equal(t, map[string]string{LayoutKey: "1", "anarchon.job": "j", "team": "x"}, merged)
	assert.Equal(t, want, MergeMetadata(nil, want))
}

func TestUnanswered(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrNoStreamResponse, nats.ErrReconnectBufExceeded, apiErr(ErrCodeClusterNotAvailable)} {
		assert.True(t, Unanswered(err), "%v", err)
	}
	// 10158 (the same message id in flight) is an answer for most requests; a claim
	// treats it as none by itself.
	for _, err := range []error{jetstream.ErrStreamNotFound, apiErr(ErrCodeStreamNameInUse), apiErr(ErrCodeDuplicateInProcess), context.Canceled, errors.New("x")} {
		assert.False(t, Unanswered(err), "%v", err)
	}
}

func TestBackoff(t *testing.T) {
	for _, b := range []Backoff{SetupBackoff, ClaimBackoff, ContentionBackoff} {
		for n := 1; n < 40; n++ {
			d := b.Delay(n)
			hi := min(b.Base<<min(n-1, 20), b.Max)
			assert.GreaterOrEqual(t, d, hi/2, "%v retry %d", b, n)
			assert.LessOrEqual(t, d, hi, "%v retry %d", b, n)
		}
	}
	assert.LessOrEqual(t, SetupBackoff.Delay(1), 50*time.Millisecond)
	assert.GreaterOrEqual(t, SetupBackoff.Delay(100), 500*time.Millisecond, "capped, not overflowed")
}

func TestTTL(t *testing.T) {
	for _, tc := range []struct {
		d, want time.Duration
		header  string
	}{
		{0, time.Second, "1s"}, // the server's minimum
		{500 * time.Millisecond, time.Second, "1s"},
		{time.Second, time.Second, "1s"},
		{time.Second + time.Nanosecond, 2 * time.Second, "2s"},
		{1500 * time.Millisecond, 2 * time.Second, "2s"}, // the server truncates: 1.5s would live 1s
		{30 * time.Second, 30 * time.Second, "30s"},
	} {
		assert.Equal(t, tc.want, TTL(tc.d), "%v", tc.d)
		assert.Equal(t, tc.header, TTLHeader(tc.d), "%v", tc.d)
	}
}

func TestMatch(t *testing.T) {
	have := jetstream.StreamConfig{Subjects: []string{"a.>"}, Replicas: 1, MaxMsgs: 5, Metadata: map[string]string{"x": "1"}}
	want := jetstream.StreamConfig{Subjects: []string{"b.>"}, Replicas: 3, MaxMsgs: 5, AllowMsgTTL: true, Metadata: map[string]string{LayoutKey: "1"}}
	upd := have
	var c Changes
	c.Match(&upd, have, want, Replicas, MaxMsgs, Subjects, AllowMsgTTL, Metadata)
	assert.Equal(t, Changes{"num_replicas", "subjects", "allow_msg_ttl", "metadata"}, c, "in the order asked, only what differs")
	assert.Equal(t, 3, upd.Replicas)
	assert.Equal(t, []string{"b.>"}, upd.Subjects)
	assert.True(t, upd.AllowMsgTTL)
	assert.Equal(t, map[string]string{"x": "1", LayoutKey: "1"}, upd.Metadata, "other metadata kept")
	assert.Equal(t, 1, have.Replicas, "have is not changed")

	c = nil
	c.Match(&upd, upd, want, Replicas, MaxMsgs, Subjects, AllowMsgTTL, Metadata)
	assert.Empty(t, c, "nothing to change")
}

func TestRetry(t *testing.T) {
	calls := 0
	n, err := Retry(ctx(t), time.Second, Unanswered, func(ctx context.Context) error {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no attempt deadline")
		}
		if calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, 3, calls)

	definite := errors.New("definite")
	calls = 0
	_, err = Retry(ctx(t), time.Second, Unanswered, func(context.Context) error { calls++; return definite })
	assert.ErrorIs(t, err, definite)
	assert.Equal(t, 1, calls)

	// Until ctx ends: the last error comes with ctx's, or alone when it is ctx's.
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = ClaimBackoff.Retry(short, 0, Unanswered, func(context.Context) error { return nats.ErrTimeout })
	assert.ErrorIs(t, err, nats.ErrTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = ClaimBackoff.Retry(short, 0, Unanswered, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	assert.Equal(t, context.DeadlineExceeded, err)
}
