package jetstream

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeJob(t *testing.T) {
	for _, tc := range []struct{ job, want string }{
		{"nightly-report", "nightly-report"},
		{"report.v2", "report_2ev2"},
		{"Report", "_52eport"},
		{"a b", "a_20b"},
		{"*", "_2a"},
		{">", "_3e"},
		{"a/b", "a_2fb"},
		{"_", "_5f"},
		{"é", "_c3_a9"},
	} {
		assert.Equal(t, tc.want, encodeJob(tc.job, 100), "job %q", tc.job)
	}

	long := strings.Repeat("Ab.", 200)
	tok := encodeJob(long, 100)
	assert.LessOrEqual(t, len(tok), 100)
	assert.Greater(t, len(tok), 95, "an escape is never cut, so at most two bytes are lost")
	assert.Contains(t, tok, hashMarker)
	assert.Equal(t, tok, encodeJob(long, 100), "deterministic")
	assert.NotEqual(t, tok, encodeJob(long+"x", 100), "a different long name has a different token")
}

func TestNamesFor(t *testing.T) {
	c := defaultConfig()
	n := c.namesFor("Billing.Invoices")
	assert.Equal(t, "ANARCHON__42illing_2e_49nvoices", n.stream)
	assert.Equal(t, "anarchon._42illing_2e_49nvoices.>", n.all)
	assert.Equal(t, "anarchon._42illing_2e_49nvoices.claim.1700000000000", n.claimSubject(1_700_000_000_000))
	assert.Equal(t, "_42illing_2e_49nvoices:1700000000000", n.msgID(1_700_000_000_000))
	assert.Equal(t, kindClaim, n.kindOf(n.claimSubject(-5)))
	assert.Equal(t, kindResult, n.kindOf(n.results))
	assert.Equal(t, kindManual, n.kindOf(n.manual))
	assert.Equal(t, kindLease, n.kindOf(n.leases))
	assert.Empty(t, n.kindOf(n.claims+".x"))
	assert.Empty(t, n.kindOf(n.claims))
	assert.Empty(t, n.kindOf("anarchon.other.result"))

	huge := c.namesFor(strings.Repeat("x", 4096))
	assert.Len(t, huge.stream, maxStreamName, "a long name fills the stream name limit exactly")
}

// unescape inverts the escape form of encodeJob (tokens without the hash marker).
func unescape(tok string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		if tok[i] != '_' {
			b.WriteByte(tok[i])
			continue
		}
		if i+2 >= len(tok) {
			return "", false
		}
		v, err := hex.DecodeString(tok[i+1 : i+3])
		if err != nil {
			return "", false
		}
		b.Write(v)
		i += 2
	}
	return b.String(), true
}

func FuzzEncodeJob(f *testing.F) {
	for _, s := range []string{"a", "A.b c", "*", ">", "é日本", strings.Repeat("x.", 300), "_h", "a_2eb", "\x00\xff"} {
		f.Add(s, 120)
	}
	f.Fuzz(func(t *testing.T, job string, budget int) {
		if job == "" {
			return
		}
		budget = 40 + (budget%200+200)%200 // 40..239, as prefixes allow
		tok := encodeJob(job, budget)
		require.NotEmpty(t, tok)
		require.LessOrEqual(t, len(tok), budget)
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			require.True(t, ok, "byte %q in token %q", c, tok)
		}
		if !strings.Contains(tok, hashMarker) {
			back, ok := unescape(tok)
			require.True(t, ok, "token %q", tok)
			require.Equal(t, job, back, "the escape form is injective")
		} else {
			require.True(t, strings.HasSuffix(tok, tok[strings.LastIndex(tok, hashMarker):]))
			require.Len(t, tok[strings.LastIndex(tok, hashMarker):], len(hashMarker)+hashChars)
		}
	})
}

// TestEntryNames: an entry's subjects are in its job's stream, under
// entry.<entry token>, apart from the job's and from each other entry's; its
// claims' ids are its own.
func TestEntryNames(t *testing.T) {
	c := defaultConfig()
	job := c.namesFor("Billing.Invoices")
	e := job.entry("Cust 42.a*>")
	assert.Equal(t, job.stream, e.stream, "the job's stream")
	assert.Equal(t, "anarchon._42illing_2e_49nvoices.entry._43ust_2042_2ea_2a_3e.claim.1700000000000", e.claimSubject(1_700_000_000_000))
	assert.Equal(t, "anarchon._42illing_2e_49nvoices.entry._43ust_2042_2ea_2a_3e.>", e.all)
	assert.Equal(t, "_42illing_2e_49nvoices.entry._43ust_2042_2ea_2a_3e:1700000000000", e.msgID(1_700_000_000_000))
	assert.NotEqual(t, job.slotKey(1), e.slotKey(1))
	for _, subj := range []string{e.claimSubject(5), e.results, e.manual, e.leases} {
		assert.Equal(t, kindEntry, job.kindOf(subj), "%s is an entry's, not the job's", subj)
		assert.True(t, strings.HasPrefix(subj, strings.TrimSuffix(job.all, ">")), "%s: in the job's stream", subj)
	}
	assert.Equal(t, kindClaim, e.kindOf(e.claimSubject(-5)))
	assert.Equal(t, kindResult, e.kindOf(e.results))
	assert.Equal(t, kindManual, e.kindOf(e.manual))
	assert.Equal(t, kindLease, e.kindOf(e.leases))
	assert.Empty(t, e.kindOf(job.results), "the job's records are not the entry's")
	assert.Empty(t, e.kindOf(job.entry("other").results), "nor another entry's")
	assert.Empty(t, e.kindOf(job.entry("Cust 42.a*>").entries+".x"))

	long := strings.Repeat("é", 128) // 256 bytes: the longest ID, never cut
	tok := strings.TrimSuffix(strings.TrimPrefix(job.entry(long).all, job.entries+"."), ".>")
	got, ok := unescape(tok)
	require.True(t, ok)
	assert.Equal(t, long, got)
	for _, bad := range []string{".", "*", ">", " "} {
		assert.NotContains(t, tok, bad)
	}
}
