package natsutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSubjectsOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a", "a", true},
		{"a", "b", false},
		{"a.b", "a", false},
		{"a", "a.b", false},
		{"a.b", "a.b", true},
		{"a.*", "a.b", true},
		{"a.*", "a", false},
		{"a.*", "a.b.c", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"a.>", "a", false},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{">", "a", true},
		{">", "a.b.c", true},
		{"a.*.c", "a.b.>", true},
		{"a.*.c", "a.b.d", false},
		{"a.*.c", "a.*.d", false},
		{"a.*", "a.>", true},
		{"a.*", "*.b", true},
		{"a.*.*", "*.b", false},
		{"anarchon.HISTORY.*", "anarchon.history.>", false},
		{"anarchon.HISTORY.*", "anarchon.HISTORY.report.>", false},
		{"anarchon.HISTORY.*", "anarchon.HISTORY.>", true},
		{"anarchon.JOBS", "anarchon.*.>", false},
		{"anarchon.TRIGGER.*", "anarchon.*.>", true},
		{"$KV.anarchon_leases.>", "$KV.anarchon_registry.>", false},
		{"$KV.anarchon_leases.>", "$KV.anarchon_leases.>", true},
		{"$KV.*.>", "$KV.anarchon_leases.lease.x", true},
		{"ab", "a", false},
		{"a*", "ab", false}, // "a*" is a literal token, not a wildcard
	} {
		assert.Equal(t, c.want, SubjectsOverlap(c.a, c.b), "%q and %q", c.a, c.b)
		assert.Equal(t, c.want, SubjectsOverlap(c.b, c.a), "%q and %q (swapped)", c.b, c.a)
	}
}
