package option

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

type config struct{ d time.Duration }

type opt func(*config) error

var errInvalid = Sentinel("pkg")

func withD(d time.Duration) opt {
	return Checked(errInvalid, "WithD", d, Positive, func(c *config, d time.Duration) { c.d = d })
}

func TestSentinel(t *testing.T) {
	assert.Equal(t, "pkg: invalid option", errInvalid.Error())
	assert.ErrorIs(t, errInvalid, backend.ErrInvalidOption)
	assert.NotErrorIs(t, errInvalid, backend.ErrInvalidConfig)
	assert.NotErrorIs(t, backend.ErrInvalidOption, errInvalid, "the general error is not the package's")
	assert.NotErrorIs(t, Sentinel("other"), errInvalid, "each package has its own")
}

func TestApplyAndChecked(t *testing.T) {
	var c config
	require.NoError(t, Apply(&c, []opt{nil, withD(time.Second), nil}), "nil options are skipped")
	assert.Equal(t, time.Second, c.d)

	err := Apply(&c, []opt{withD(2 * time.Second), withD(0), withD(3 * time.Second)})
	require.ErrorIs(t, err, errInvalid)
	assert.ErrorIs(t, err, backend.ErrInvalidOption)
	assert.Equal(t, "pkg: invalid option: WithD(0s): must be positive", err.Error(), "names the option and the value, once prefixed")
	assert.Equal(t, 2*time.Second, c.d, "applied in order, up to the invalid one")

	bad := errors.New("why")
	err = Checked(errInvalid, "WithX", 7, func(int) error { return bad }, func(*config, int) {})(&c)
	assert.ErrorIs(t, err, bad, "the check's own error stays reachable")
}

func TestCheckedQuotesStrings(t *testing.T) {
	var c struct{ s string }
	err := Checked(errInvalid, "WithName", "", func(s string) error {
		if s == "" {
			return errors.New("empty")
		}
		return nil
	}, func(*struct{ s string }, string) {})(&c)
	assert.EqualError(t, err, `pkg: invalid option: WithName(""): empty`)
}
