package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend/memory"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// TestRegistryInParts: the registry entry of 10,000 jobs with 1 KiB names (12 MB
// of declarations) is a small head and parts that each fit in a message; a
// heartbeat rewrites the parts one time in registryPartRefresh, the head every
// time; a reader of format 1 sees the head alone, which says format 2; and the
// parts read back are the declarations.
func TestRegistryInParts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := natstest.Server(t, embedded.Options{})
	nc := natstest.Conn(t, srv)
	s, err := scheduler.New(scheduler.Config{Backend: memory.New(), Instance: "big"})
	require.NoError(t, err)
	const n = 10_000
	for i := range n {
		name := fmt.Sprintf("job-%05d-", i) + strings.Repeat("x", scheduler.MaxJobNameLen-10)
		require.NoError(t, s.Every(name, time.Hour, func(context.Context, scheduler.Run) error { return nil }))
	}
	c, err := newConfig(roleService, nil)
	require.NoError(t, err)
	t0 := time.Now()
	r, err := startRegistry(ctx, nc, s, c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Logf("layout and first write: %v", time.Since(t0))
	t.Cleanup(func() { require.NoError(t, r.stop(context.Background())) })

	require.Nil(t, r.inline)
	total := 0
	for _, p := range r.parts {
		assert.LessOrEqual(t, len(p), int(nc.MaxPayload())-replyHeadroom)
		total += len(p)
	}
	head, err := json.Marshal(r.head)
	require.NoError(t, err)
	assert.Less(t, len(head), 512)
	t.Logf("entry of %d jobs: %d parts, %d bytes; head %d bytes", n, len(r.parts), total, len(head))

	for beat := 1; beat <= registryPartRefresh; beat++ {
		parts := r.beats == 0
		t0 := time.Now()
		require.NoError(t, r.put(ctx))
		if parts || beat == 1 {
			t.Logf("heartbeat %d (parts written: %v): %v", beat, parts, time.Since(t0))
		}
	}

	js := natstest.JetStream(t, nc)
	heads, err := readEntries(ctx, js, c.bucket, JobToken(DefaultPrefix)+".*")
	require.NoError(t, err)
	require.Len(t, heads, 1, "a reader of one-value entries sees the head alone")
	var old struct {
		Format   int    `json:"format"`
		Instance string `json:"instance"`
	}
	require.NoError(t, json.Unmarshal(heads[r.key], &old))
	assert.Equal(t, 2, old.Format, "which it reports as a newer format")
	assert.Equal(t, "big", old.Instance)

	t0 = time.Now()
	values, err := readEntries(ctx, js, c.bucket, JobToken(DefaultPrefix)+".>")
	require.NoError(t, err)
	regs, bad := entriesOf(subjects(DefaultPrefix), values)
	t.Logf("read back: %v", time.Since(t0))
	require.Empty(t, bad)
	require.Len(t, regs, 1)
	require.Len(t, regs[0].Jobs, n)
	assert.Equal(t, r.declared[regs[0].Jobs[n-1].Name], regs[0].Jobs[n-1])

	// A part gone (expired, or not written yet) makes the entry unreadable, said so.
	delete(values, partKey(r.key, r.head.Digest, 1))
	_, bad = entriesOf(subjects(DefaultPrefix), values)
	require.Len(t, bad, 1)
	assert.ErrorContains(t, bad[0], `registry entry of "big": part 2 of`)
	assert.ErrorContains(t, bad[0], "is missing (the replica stopped, or is writing it: ask again)")
}

// The policies are compared only while every replica declares them: a replica
// of an earlier version (no Policies) is no conflict about them, and the
// fields it does declare are still compared.
func TestConflictsOfPoliciesDuringAnUpgrade(t *testing.T) {
	mine := Declaration{Name: "report", Schedule: "every 1h0m0s", Overlap: "allow", CatchUp: "none",
		Policies: &Policies{MaxManual: 4, Retry: &RetryPolicy{Attempts: 3, BackoffMS: 1000}}}
	old := mine
	old.Policies = nil
	other := mine
	other.Policies = &Policies{MaxManual: 2, Retry: &RetryPolicy{Attempts: 3, BackoffMS: 1000}}
	entries := func(ds map[string]Declaration) map[string]*regEntry {
		out := map[string]*regEntry{}
		for inst, d := range ds {
			out[inst] = &regEntry{reg: Registration{Instance: inst}, byName: map[string]Declaration{d.Name: d}}
		}
		return out
	}
	assert.Empty(t, conflictOf("report", mine, "A", entries(map[string]Declaration{"old": old})))
	assert.Equal(t, `manual runs: "2 at once per replica" on B; "4 at once per replica" on A`,
		conflictOf("report", mine, "A", entries(map[string]Declaration{"B": other})))
	assert.Empty(t, conflictOf("report", mine, "A", entries(map[string]Declaration{"B": other, "old": old})),
		"not while a replica declares none")
	old.Overlap = "skip"
	assert.Equal(t, `overlap: "allow" on A; "skip" on old`, conflictOf("report", mine, "A", entries(map[string]Declaration{"old": old})))
}
