package web

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anarchon/anarchon/fleet"
)

// TestStatusOfTriggerRefusals: a run refused by the replica because the job is
// busy, or runs as many manual runs as it may, is the HTTP status that says so;
// so are an entry the job does not have and an entry changed by another writer.
func TestStatusOfTriggerRefusals(t *testing.T) {
	for code, want := range map[int]int{
		fleet.CodeJobBusy:           http.StatusConflict,
		fleet.CodeTooManyManualRuns: http.StatusTooManyRequests,
		fleet.CodeBadRequest:        http.StatusBadRequest,
		fleet.CodeUnknownJob:        http.StatusNotFound,
		fleet.CodeEntryNotFound:     http.StatusNotFound,
		fleet.CodeEntryConflict:     http.StatusConflict,
		fleet.CodeUnavailable:       http.StatusServiceUnavailable,
		fleet.CodeInternal:          http.StatusBadGateway,
	} {
		assert.Equal(t, want, statusOf(&fleet.ServiceError{Code: code}), "code %d", code)
	}
}
