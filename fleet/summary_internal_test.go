package fleet

import (
	"encoding/base64"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	pause := &PauseInfo{Job: "a", Reason: "r"}
	f := summarize([]Replica{
		{Instance: "C", Version: "0.2.0", Jobs: []JobState{{Name: "a", Schedule: "every 1s"}}},
		{Instance: "A", Version: Version, Jobs: []JobState{{Name: "a", Schedule: "every 1s", Pause: pause}, {Name: "b"}}},
		{Instance: "B", Version: Version, Jobs: []JobState{{Name: "a", Schedule: "every 1s", Pause: pause}, {Name: "b"}}},
		{Instance: "B", Version: Version},
		{Instance: "D", Version: Version},
	})
	var order []string
	for _, r := range f.Replicas {
		order = append(order, r.Instance)
	}
	assert.Equal(t, []string{"A", "B", "B", "C", "D"}, order)
	assert.Equal(t, []string{
		"replicas run different library versions: " + Version + " (A, B, B, D); 0.2.0 (C)",
		`2 replicas answer as instance "B": give each replica its own name`,
	}, f.Warnings)
	require.Len(t, f.Jobs, 2)
	a, b := f.Jobs[0], f.Jobs[1]
	assert.Equal(t, "every 1s", a.Schedule)
	assert.Nil(t, a.Schedules)
	assert.Equal(t, pause, a.Pause)
	assert.Equal(t, []string{"A", "B"}, a.PausedOn)
	assert.Equal(t, []string{
		"paused on A, B but not on C (a pause reaches every replica within a second; ask again)",
		"not declared on D",
	}, a.Warnings)
	assert.Empty(t, b.Schedule, "declared without a schedule")
	assert.Equal(t, []string{"A", "B"}, b.Replicas)
	assert.Equal(t, []string{"not declared on C, D"}, b.Warnings)

	empty := summarize(nil)
	assert.NotNil(t, empty.Replicas, "[] in JSON, not null")
	assert.NotNil(t, empty.Jobs)
}

func TestJobTokenAndPrefix(t *testing.T) {
	for _, job := range []string{"a", "nightly backup.db > *", "ünïcode", "a.b.c"} {
		tok := JobToken(job)
		assert.NotContains(t, tok, ".")
		back, err := base64.RawURLEncoding.DecodeString(tok)
		require.NoError(t, err)
		assert.Equal(t, job, string(back))
	}
	assert.Equal(t, "anarchon.PAUSE.YQ", subjects("anarchon").job(verbPause, "a"))
	for prefix, ok := range map[string]bool{"anarchon": true, "ops.billing": true, "a.$b": true, "a._INBOX": true,
		"": false, "a.": false, ".a": false, "a.*": false, "a>": false, "a b": false, "a\tb": false,
		"$JS": false, "$KV.x": false, "$SRV": false, "_INBOX": false, "_INBOX_x.y": false} {
		assert.Equal(t, ok, validPrefix(prefix) == nil, "%q", prefix)
	}
	assert.Equal(t, "a b c", oneLine("a\nb\r\n\tc\x00"))
}

// FuzzPauseOptions: any body either is refused as a bad request or gives options
// the scheduler accepts (a reason, text within bounds, an end in the future).
func FuzzPauseOptions(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"v":1,"reason":"r"}`, `{"v":1,"reason":"r","for":"1h"}`, `{"v":1,"reason":"r","until":"2999-01-01T00:00:00Z"}`,
		`{"v":1,"reason":"r","until":"2000-01-01T00:00:00Z"}`, `{"v":1,"reason":"r","for":"-1s"}`, `{"v":1,"reason":1}`, `{"v":1,"reason":"r"} x`, `null`,
		`{"reason":"r"}`, `{"v":2,"reason":"r"}`, `{"v":"1","reason":"r"}`, `{"v":1e400}`} {
		f.Add([]byte(seed))
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		opts, err := pauseOptions(body, now)
		if err != nil {
			code, _ := replyFor(err)
			assert.Equal(t, CodeBadRequest, code)
			return
		}
		assert.NotEmpty(t, opts.Reason)
		assert.True(t, utf8.ValidString(opts.Reason) && utf8.ValidString(opts.By))
		assert.True(t, opts.Until.IsZero() || opts.Until.After(now))
	})
}
