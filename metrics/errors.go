package metrics

import (
	"errors"

	"github.com/anarchon/anarchon/internal/option"
)

// Errors returned by this package. Match them with errors.Is; the Prometheus error
// that caused one stays reachable through errors.As.
var (
	// ErrInvalidOption is wrapped by New and Wire for an invalid option value. The
	// message names the option. It matches scheduler.ErrInvalidOption too, so one
	// errors.Is covers the invalid options of every anarchon package.
	ErrInvalidOption = option.Sentinel("metrics")
	// ErrInvalidRegisterer is wrapped by Register and Wire when the registerer is nil.
	ErrInvalidRegisterer = errors.New("metrics: invalid registerer")
	// ErrAlreadyRegistered is wrapped by Register when the registerer already holds
	// these collectors (the same Metrics registered twice, or another Metrics with
	// the same namespace). The prometheus.AlreadyRegisteredError is wrapped too.
	ErrAlreadyRegistered = errors.New("metrics: already registered")
)
