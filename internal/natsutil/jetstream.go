package natsutil

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NoJetStream reports whether err says that the server, or the account, has no
// JetStream: asking again will not help. No responders at all means the same:
// every JetStream server answers the API, if only with "no leader yet".
func NoJetStream(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrNoResponders)
}
