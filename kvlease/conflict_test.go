package kvlease

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/internal/natsutil"
)

// Every way the server and nats.go report a lost compare-and-set is a conflict: on a
// single server 10071, on a replicated stream also 10164, wrapped or not.
func TestIsConflict(t *testing.T) {
	for name, err := range map[string]error{
		"10071":                  &jetstream.APIError{Code: 400, ErrorCode: natsutil.ErrCodeWrongLastSequence},
		"10164 (replicated)":     &jetstream.APIError{Code: 400, ErrorCode: natsutil.ErrCodeWrongLastSequenceInFlight},
		"wrapped 10164":          fmt.Errorf("publish: %w", &jetstream.APIError{Code: 400, ErrorCode: natsutil.ErrCodeWrongLastSequenceInFlight}),
		"ErrKeyRevisionMismatch": fmt.Errorf("x: %w", jetstream.ErrKeyRevisionMismatch),
		"ErrKeyExists":           jetstream.ErrKeyExists,
	} {
		assert.True(t, isConflict(err), name)
	}
	for name, err := range map[string]error{
		"nil":          nil,
		"other api":    &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled},
		"plain":        errors.New("boom"),
		"stream gone":  jetstream.ErrStreamNotFound,
		"msg notfound": jetstream.ErrMsgNotFound,
	} {
		assert.False(t, isConflict(err), name)
	}
}
