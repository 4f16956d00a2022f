package kvlease

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/machine"
)

// validKey is nats.go's rule for KV keys.
var validKey = regexp.MustCompile(`\A[-/_=\.a-zA-Z0-9]+\z`)

func keyOK(k string) bool {
	return validKey.MatchString(k) && !strings.HasPrefix(k, ".") && !strings.HasSuffix(k, ".") && !strings.Contains(k, "..")
}

func TestKeysForOddJobNames(t *testing.T) {
	names := []string{
		"a", "nightly report", "a.b.c", "..", ".", "*", ">", "a.*.>", "tab\there", "ünïcødé ✓ 日本",
		"slash/and\\back", "=+/", "-", "_", strings.Repeat("x", 256), "$KV.bucket.key", "lease.x.1",
	}
	slots := []time.Time{time.UnixMilli(0), time.UnixMilli(1_700_000_000_123), time.UnixMilli(-5_000)}
	seen := map[string]string{}
	for _, name := range names {
		for _, slot := range slots {
			k := keysFor(name, slot)
			for _, key := range []string{k.lease, k.run} {
				require.True(t, keyOK(key), "key %q for job %q is not a valid KV key", key, name)
				prefix, job, got, err := parseKey(key)
				require.NoError(t, err, key)
				assert.Equal(t, name, job)
				assert.True(t, slot.Equal(got), "slot of %q: %v, want %v", key, got, slot)
				assert.Contains(t, []string{leasePrefix, runPrefix}, prefix)
				if other, dup := seen[key]; dup {
					t.Fatalf("jobs %q and %q share key %q", other, name, key)
				}
				seen[key] = name
			}
			// One job's keys never match another job's wildcard.
			assert.Equal(t, 2, strings.Count(k.lease, "."), "a key is exactly three tokens: %q", k.lease)
		}
	}
	_, _, _, err := parseKey("other.key")
	assert.Error(t, err)
	_, _, _, err = parseKey("lease.!!.12")
	assert.Error(t, err)
	_, _, _, err = parseKey("run.YQ.notanumber")
	assert.Error(t, err)
}

func FuzzKeys(f *testing.F) {
	f.Add("nightly", int64(1_700_000_000_000))
	f.Add("a.b c", int64(-1))
	f.Add("✓", int64(0))
	f.Fuzz(func(t *testing.T, job string, ms int64) {
		if !utf8.ValidString(job) {
			return
		}
		k := keysFor(job, time.UnixMilli(ms))
		if job != "" && !keyOK(k.lease) {
			t.Fatalf("invalid key %q", k.lease)
		}
		_, got, slot, err := parseKey(k.run)
		if job == "" {
			return
		}
		if err != nil || got != job || slot.UnixMilli() != ms {
			t.Fatalf("round trip of %q/%d: %q/%d, %v", job, ms, got, slot.UnixMilli(), err)
		}
		// Parsing arbitrary keys never panics.
		_, _, _, _ = parseKey(job)
	})
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(`{"v":2,"token":"t","instance":"i","lease_ms":1000}`))
	f.Add([]byte(`{"v":2,"job":"j","run":{"slot":"2026-01-01T00:00:00Z","phase":2,"token":"t"}}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		le, err := decodeLease(entry{rev: 1, put: true, value: data})
		if err == nil && (le == nil || le.Token == "" || le.LeaseMS <= 0) {
			t.Fatalf("accepted a lease without token or lease: %s", data)
		}
		re, err := decodeRun(entry{rev: 1, put: true, value: data})
		if err == nil && (re == nil || re.Run.Token == "" || re.V < recordVersion) {
			t.Fatalf("accepted a run without token or of another layout: %s", data)
		}
	})
}

func TestServerClockBounds(t *testing.T) {
	var c serverClock
	now := time.Now()
	_, _, ok := c.bounds(now)
	assert.False(t, ok, "no sample yet")
	assert.Equal(t, now, c.estimate(now))

	// The server is 1h ahead; the reading took 10ms.
	sent := now
	recv := now.Add(10 * time.Millisecond)
	ts := now.Add(time.Hour + 5*time.Millisecond)
	c.observe(ts, sent, recv)
	later := recv.Add(2 * time.Second)
	lo, hi, ok := c.bounds(later)
	require.True(t, ok)
	truth := later.Add(time.Hour)
	assert.False(t, lo.After(truth), "lo %v after the truth %v", lo, truth)
	assert.False(t, hi.Before(truth), "hi %v before the truth %v", hi, truth)
	assert.Less(t, hi.Sub(lo), 20*time.Millisecond, "the interval is about the round trip")

	_, _, ok = c.bounds(recv.Add(clockSampleTTL + time.Millisecond))
	assert.False(t, ok, "a sample is used for clockSampleTTL only")
	c.observe(time.Time{}, sent, recv)
	_, _, ok = c.bounds(later)
	assert.True(t, ok, "a zero timestamp is no sample and keeps the last one")
}

func TestRunTTL(t *testing.T) {
	now := time.Now()
	run := machine.Run{Phase: machine.Finished, Changed: now, Keep: 1500 * time.Millisecond}
	assert.Equal(t, 2*time.Second, runTTL(run, false, now), "whole seconds, rounded up")
	run.Phase, run.Lease, run.Keep = machine.Running, 30*time.Second, time.Minute
	assert.Equal(t, 90*time.Second, runTTL(run, false, now), "three leases while running")
	assert.Zero(t, runTTL(machine.Run{Phase: machine.Buffered}, false, now), "a buffered slot is kept")
	assert.Zero(t, runTTL(run, true, now), "records to write are kept")
}

// TestEntryRunKeys: an entry's run keys carry one token more than its job's, so a
// pattern of the job's keys never matches them, nor one entry's another's; and
// they parse back to the entry's run name.
func TestEntryRunKeys(t *testing.T) {
	slot := time.UnixMilli(1_700_000_000_123)
	job := "a.b c ✓"
	plain := keysFor(job, slot)
	assert.Equal(t, leasePrefix+nameToken(job)+".1700000000123", plain.lease, "a job's keys are as before entries")
	seen := map[string]string{}
	for _, id := range []string{"a", "a.b", "*", ">", "ü ✓", strings.Repeat("x", 256)} {
		name := backend.EntryRunName(job, id)
		k := keysFor(name, slot)
		require.True(t, keyOK(k.run), "%q", k.run)
		assert.Equal(t, 3, strings.Count(k.lease, "."), "%q: four tokens", k.lease)
		assert.True(t, strings.HasPrefix(k.lease, leasePrefix+nameToken(job)+"."), "beside its job's keys")
		_, got, s, err := parseKey(k.run)
		require.NoError(t, err)
		assert.Equal(t, name, got)
		assert.True(t, slot.Equal(s))
		assert.Equal(t, jobPrefix+nameToken(job)+"."+nameToken(id), jobKey(name))
		require.NotContains(t, seen, k.run)
		seen[k.run] = id
		j, i, ok := parseEntryKey(entryKey(job, id))
		require.True(t, ok)
		assert.Equal(t, [2]string{job, id}, [2]string{j, i})
	}
	for _, bad := range []string{"entry.YQ", "entry.YQ.", "entry..YQ", "entry.YQ.Yg.Yw", "entry.!!.YQ", "lease.YQ.Yg"} {
		_, _, ok := parseEntryKey(bad)
		assert.False(t, ok, bad)
	}
	_, _, _, err := parseKey("run.YQ.!!.12")
	assert.Error(t, err)
	_, _, _, err = parseKey("run.YQ.Yg.Yw.12")
	assert.Error(t, err, "at most two name tokens")
}

func FuzzEntryKeys(f *testing.F) {
	f.Add("nightly", "customer 42")
	f.Add("a.b", "*")
	f.Fuzz(func(t *testing.T, job, id string) {
		_, _, _ = parseEntryKey(job) // parsing arbitrary keys never panics
		if backend.ValidateJobName(job) != nil || backend.ValidateEntryID(id) != nil {
			return
		}
		k := entryKey(job, id)
		if !keyOK(k) || strings.Count(k, ".") != 2 {
			t.Fatalf("invalid entry key %q", k)
		}
		j, i, ok := parseEntryKey(k)
		if !ok || j != job || i != id {
			t.Fatalf("round trip of %q/%q: %q/%q", job, id, j, i)
		}
		name := backend.EntryRunName(job, id)
		if _, got, _, err := parseKey(keysFor(name, time.UnixMilli(1)).run); err != nil || got != name {
			t.Fatalf("run key of %q: %q, %v", name, got, err)
		}
	})
}

// Member keys are valid keys of two tokens, one per instance, that no lease or
// run key pattern matches.
func TestMemberKeys(t *testing.T) {
	names := []string{"a", "a.b", "*", ">", "../x", "with spaces", "ünïcode ✓", strings.Repeat("x", backend.MaxJobNameLen), "lease.x.1"}
	seen := map[string]bool{}
	for _, name := range names {
		k := memberKey(name)
		require.True(t, keyOK(k), "key %q of %q", k, name)
		assert.Equal(t, 1, strings.Count(k, "."), "one token after the prefix: %q", k)
		got, ok := parseMemberKey(k)
		assert.True(t, ok)
		assert.Equal(t, name, got)
		assert.False(t, seen[k], "a key of its own: %q", k)
		seen[k] = true
		_, _, _, err := parseKey(k)
		assert.Error(t, err, "not a lease or run key: %q", k)
	}
	for _, k := range []string{"member.", "member.!!", "member.YQ.YQ", "cal.YQ"} {
		_, ok := parseMemberKey(k)
		assert.False(t, ok, k)
	}
}
