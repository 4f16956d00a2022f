package backendutil

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

func TestCallContext(t *testing.T) {
	c, cancel := CallContext(t.Context(), time.Minute)
	defer cancel()
	dl, ok := c.Deadline()
	require.True(t, ok, "a context without deadline gets one")
	assert.WithinDuration(t, time.Now().Add(time.Minute), dl, time.Second)

	far, cancelFar := context.WithTimeout(t.Context(), time.Hour)
	defer cancelFar()
	c, cancel = CallContext(far, time.Minute)
	defer cancel()
	dl, _ = c.Deadline()
	want, _ := far.Deadline()
	assert.Equal(t, want, dl, "a deadline already set is kept")
}

func TestCheckClaim(t *testing.T) {
	require.NoError(t, CheckClaim("pkg", "job", "token"))
	for _, tc := range []struct{ job, token, want string }{
		{"", "t", "invalid job name"},
		{" job", "t", "invalid job name"},
		{strings.Repeat("x", backend.MaxJobNameLen+1), "t", "invalid job name"},
		{"job", "", "has no token"},
	} {
		err := CheckClaim("pkg", tc.job, tc.token)
		assert.ErrorIs(t, err, backend.ErrInvalidClaim)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "pkg: ")
	}
	assert.ErrorIs(t, CheckClaim("pkg", "", "t"), backend.ErrInvalidJobName)
	assert.Equal(t, `job "j" slot 2026-01-02T03:04:05.006Z`, DescribeRun("j", time.Date(2026, 1, 2, 4, 4, 5, 6e6, time.FixedZone("CET", 3600))))
}
