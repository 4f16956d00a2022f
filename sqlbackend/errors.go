package sqlbackend

import (
	"errors"

	"github.com/anarchon/anarchon/internal/option"
)

var (
	// ErrInvalidOption: an option New cannot accept; the message names it. It
	// matches backend.ErrInvalidOption too.
	ErrInvalidOption = option.Sentinel("sqlbackend")
	// ErrSchemaTooNew is returned by Init when the database's tables were created
	// by a newer version of this package than the one running.
	ErrSchemaTooNew = errors.New("sqlbackend: the database's schema is newer than this version knows")
	// ErrDialect is returned by New when the dialect misses a required field.
	ErrDialect = errors.New("sqlbackend: incomplete dialect")
)
