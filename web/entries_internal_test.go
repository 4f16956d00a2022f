package web

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/fleet"
)

// TestEntrySchedule: an entry's schedule in the words a job's has.
func TestEntrySchedule(t *testing.T) {
	at := time.Date(2027, 3, 1, 9, 30, 0, 0, time.FixedZone("EET", 2*3600))
	end := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		spec fleet.EntrySpec
		want string
	}{
		{fleet.EntrySpec{Every: "1h30m0s"}, "every 1h30m0s (aligned to UTC)"},
		{fleet.EntrySpec{Cron: "0 9 * * MON-FRI", Zone: "Europe/Athens"}, "at 09:00 on MON-FRI (Europe/Athens)"},
		{fleet.EntrySpec{Cron: "0 9 * * *"}, "at 09:00 every day (UTC)"},
		{fleet.EntrySpec{At: at}, "once at 2027-03-01T07:30:00.000Z"},
		{fleet.EntrySpec{Every: "10m0s", Start: at, End: end}, "every 10m0s (aligned to UTC), from 2027-03-01T07:30:00.000Z until 2027-06-01T00:00:00.000Z"},
		{fleet.EntrySpec{Cron: "0 9 * * *", End: end}, "at 09:00 every day (UTC), until 2027-06-01T00:00:00.000Z"},
		{fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTRepeated: "both", DSTMissing: "skip"}, "at 01:30 every day (America/New_York; DST repeated=both missing=skip)"},
		{fleet.EntrySpec{Cron: "30 1 * * *", Zone: "America/New_York", DSTRepeated: "first", DSTMissing: "shift"}, "at 01:30 every day (America/New_York)"},
		{fleet.EntrySpec{}, "–"},
	} {
		assert.Equal(t, c.want, entrySchedule(fleet.Entry{EntrySpec: c.spec}), "%+v", c.spec)
	}
}

// TestPayloadPreview: a payload is shown as text up to maxPreview bytes, cut
// between characters, with what does not print as escapes; one that is not
// UTF-8 is not shown.
func TestPayloadPreview(t *testing.T) {
	assert.Equal(t, payloadPreview{}, previewOf(nil))
	assert.Equal(t, payloadPreview{Size: 6, Text: "a\nb\tc\\x1b", Shown: 6}, previewOf([]byte("a\nb\tc\x1b")))
	assert.Equal(t, payloadPreview{Size: 2, Binary: true}, previewOf([]byte{0xff, 'a'}))
	long := strings.Repeat("a", maxPreview-1) + "é" // é straddles the cut
	p := previewOf([]byte(long))
	assert.True(t, p.Cut)
	assert.Equal(t, maxPreview-1, p.Shown)
	assert.Equal(t, strings.Repeat("a", maxPreview-1), p.Text)
	p = previewOf([]byte(strings.Repeat("b", maxPreview)))
	assert.False(t, p.Cut, "exactly maxPreview bytes are shown whole")

	assert.Equal(t, `bidi\u202etxt`, visible("bidi\u202etxt"))
	assert.Equal(t, `line\u2028sep\x7f`, visible("line\u2028sep\x7f"))
	assert.Equal(t, "ünï cødé\u00a0<b>", visible("ünï cødé\u00a0<b>"), "printable text is kept; html/template escapes markup")
}

func TestEntryState(t *testing.T) {
	next := time.Now().Add(time.Hour)
	for want, e := range map[string]fleet.EntryView{
		"paused":       {Entry: fleet.Entry{EntrySpec: fleet.EntrySpec{Paused: true}}, Followed: true},
		"not followed": {Next: next},
		"ended":        {Followed: true},
		"active":       {Followed: true, Next: next},
	} {
		assert.Equal(t, want, entryState(e))
	}
}

// TestDSTChoices: the DST selects hold the stored value selected, once; one
// this version does not know (a newer writer's) is an option of its own, so a
// change form keeps it rather than the default.
func TestDSTChoices(t *testing.T) {
	selected := func(cs []choice) []string {
		var out []string
		for _, c := range cs {
			if c.Selected {
				out = append(out, c.Value+": "+c.Label)
			}
		}
		return out
	}
	for _, c := range []struct {
		stored string
		want   []string
		n      int
	}{
		{"", []string{": once, the first time (default)"}, 3},
		{"both", []string{"both: twice"}, 3},
		{"first", []string{"first: once, the first time"}, 4},
		{"nearest", []string{"nearest: nearest (as stored)"}, 4},
	} {
		cs := entryForm{DSTRepeated: c.stored}.RepeatedChoices()
		assert.Equal(t, c.want, selected(cs), c.stored)
		assert.Len(t, cs, c.n, c.stored)
	}
	assert.Equal(t, []string{"shift: later by the jump"}, selected(entryForm{DSTMissing: "shift"}.MissingChoices()))
	assert.True(t, dstRepeatedSelect.valid("first"))
	assert.False(t, dstRepeatedSelect.valid("nearest"))
}
