package jetstream

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// setupCounter counts the requests that create or change streams.
type setupCounter struct {
	natsjs.JetStream
	creates, updates atomic.Int32
}

func (c *setupCounter) CreateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	c.creates.Add(1)
	return c.JetStream.CreateStream(ctx, cfg)
}

func (c *setupCounter) UpdateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	c.updates.Add(1)
	return c.JetStream.UpdateStream(ctx, cfg)
}

func (c *setupCounter) CreateOrUpdateStream(ctx context.Context, cfg natsjs.StreamConfig) (natsjs.Stream, error) {
	c.updates.Add(1)
	return c.JetStream.CreateOrUpdateStream(ctx, cfg)
}

// setMetadata rewrites a stream's metadata as another release would.
func setMetadata(t *testing.T, js natsjs.JetStream, stream string, change func(cfg *natsjs.StreamConfig)) {
	t.Helper()
	s, err := js.Stream(ctxFor(t), stream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	change(&cfg)
	_, err = js.UpdateStream(ctxFor(t), cfg)
	require.NoError(t, err)
}

func streamConfigOf(t *testing.T, js natsjs.JetStream, stream string) natsjs.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctxFor(t), stream)
	require.NoError(t, err)
	return s.CachedInfo().Config
}

// A stream that already is as the job needs gets no update: N instances preparing
// at once would otherwise send N updates that change nothing. On one server and on
// R3, where the server fills in settings of its own.
func TestPrepareJobSendsNoUpdateWhenStreamMatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		connect  func(t *testing.T) natsjs.JetStream
	}{
		{"single", 1, func(t *testing.T) natsjs.JetStream {
			return natstest.JetStream(t, natstest.Conn(t, natstest.Server(t, embedded.Options{})))
		}},
		{"R3", 3, func(t *testing.T) natsjs.JetStream {
			c := natstest.Cluster(t, embedded.ClusterOptions{Nodes: 3})
			return natstest.JetStream(t, natstest.Dial(t, c.Connect))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := tc.connect(t)
			job := limits("nochange")
			first := newBackend(t, js, WithReplicas(tc.replicas))
			require.NoError(t, first.PrepareJob(ctxFor(t), job))

			counted := &setupCounter{JetStream: js}
			second := newBackend(t, counted, WithReplicas(tc.replicas))
			require.NoError(t, second.PrepareJob(ctxFor(t), job))
			assert.Zero(t, counted.updates.Load(), "no update for a stream that matches")
			assert.Zero(t, counted.creates.Load(), "no create for a stream that exists")

			won, err := second.Claim(ctxFor(t), claimIn(job.Job, time.UnixMilli(1_900_000_000_000), "tok", "second"))
			require.NoError(t, err)
			assert.True(t, won)
		})
	}
}

// A stream set up by a newer release (a higher layout number, with settings of its
// own) is not rewritten back to this release's, which would flip-flop with the newer
// instances during a rolling upgrade; it is used as it is, since it still works.
func TestPrepareJobLeavesNewerLayoutAlone(t *testing.T) {
	// "10" is newer than "1" as a number, not as a string ("10" < "9").
	for _, newer := range []string{"2", "10"} {
		t.Run("layout "+newer, func(t *testing.T) {
			js := natstest.JetStream(t, natstest.Conn(t, natstest.Server(t, embedded.Options{})))
			job := limits("newer")
			var logs logBuffer
			old := newBackend(t, js, WithLogger(logs.logger()))
			require.NoError(t, old.PrepareJob(ctxFor(t), job))
			stream := old.cfg.namesFor(job.Job).stream

			// The newer release: its layout, a longer duplicate window, a setting of
			// its own in the metadata.
			setMetadata(t, js, stream, func(cfg *natsjs.StreamConfig) {
				cfg.Metadata[metaLayout] = newer
				cfg.Metadata["anarchon.newer"] = "yes"
				cfg.Duplicates = 20 * time.Minute
				cfg.MaxMsgsPerSubject = 70
			})

			counted := &setupCounter{JetStream: js}
			b := newBackend(t, counted, WithLogger(logs.logger()))
			require.NoError(t, b.PrepareJob(ctxFor(t), job))
			assert.Zero(t, counted.updates.Load(), "a newer layout is not rewritten")
			cfg := streamConfigOf(t, js, stream)
			assert.Equal(t, newer, cfg.Metadata[metaLayout])
			assert.Equal(t, "yes", cfg.Metadata["anarchon.newer"])
			assert.Equal(t, 20*time.Minute, cfg.Duplicates)
			assert.EqualValues(t, 70, cfg.MaxMsgsPerSubject)
			assert.Contains(t, logs.String(), "newer release", "logged at info")

			// The stream still works for this release: claims, results and history,
			// and saving a result with another history size does not resize it.
			slot := time.UnixMilli(1_900_000_000_000)
			won, err := b.Claim(ctxFor(t), claimIn(job.Job, slot, "a", "b1"))
			require.NoError(t, err)
			assert.True(t, won)
			won, err = old.Claim(ctxFor(t), claimIn(job.Job, slot, "b", "b2"))
			require.NoError(t, err)
			assert.False(t, won, "one claim per slot")
			require.NoError(t, b.SaveResult(ctxFor(t), job.Job,
				backend.StoredResult{Slot: slot, Token: "a", Status: backend.StatusOK}, backend.Retention{Size: 5}))
			hist, err := b.History(ctxFor(t), job.Job, 10)
			require.NoError(t, err)
			require.NotEmpty(t, hist)
			assert.True(t, slot.Equal(hist[0].Slot), "history reads the slot back")
			assert.Equal(t, backend.StatusOK, hist[0].Status)
			assert.EqualValues(t, 70, streamConfigOf(t, js, stream).MaxMsgsPerSubject, "not resized")
		})
	}
}

// A stream of an older layout (or none: a stream from before layouts were kept) is
// brought up to this release's, keeping other metadata.
func TestPrepareJobUpgradesOlderLayout(t *testing.T) {
	for _, older := range []string{"", "0", "not a number"} {
		t.Run("layout "+strings.ReplaceAll(older, " ", "_"), func(t *testing.T) {
			js := natstest.JetStream(t, natstest.Conn(t, natstest.Server(t, embedded.Options{})))
			job := limits("older")
			b := newBackend(t, js)
			require.NoError(t, b.PrepareJob(ctxFor(t), job))
			stream := b.cfg.namesFor(job.Job).stream
			setMetadata(t, js, stream, func(cfg *natsjs.StreamConfig) {
				if older == "" {
					delete(cfg.Metadata, metaLayout)
				} else {
					cfg.Metadata[metaLayout] = older
				}
				cfg.Metadata["operator.note"] = "kept"
			})

			counted := &setupCounter{JetStream: js}
			require.NoError(t, newBackend(t, counted).PrepareJob(ctxFor(t), job))
			assert.EqualValues(t, 1, counted.updates.Load(), "one update")
			cfg := streamConfigOf(t, js, stream)
			assert.Equal(t, layout, cfg.Metadata[metaLayout])
			assert.Equal(t, "kept", cfg.Metadata["operator.note"])
			assert.Equal(t, job.Job, cfg.Metadata[metaJob])
			assert.Equal(t, natsutil.LayoutSame, natsutil.CompareLayout(cfg.Metadata, layout))
		})
	}
}
