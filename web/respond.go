package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/anarchon/anarchon/fleet"
)

// wantsJSON: a path under api/, or a client that asks for JSON and not for HTML
// (a browser's Accept names text/html).
func wantsJSON(r *http.Request, rt route) bool {
	if rt.api {
		return true
	}
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}

// writeJSON writes v as the CLI's --json prints it (indented by two spaces).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, "web: encode JSON: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// render executes a page template into a buffer first, so a template error is a
// 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := h.pages.ExecuteTemplate(&buf, name, data); err != nil {
		h.cfg.Logger.Error("web: render", "page", name, "err", err)
		http.Error(w, "web: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is the data of the error page.
type errorPage struct {
	pageBase
	Status  int
	Text    string
	Message string
}

// fail answers an error: the error page, or fleet's ErrorBody as JSON.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if strings.HasPrefix(r.URL.EscapedPath(), h.cfg.Prefix+"api/") || wantsJSON(r, route{}) {
		writeJSON(w, status, fleet.ErrorBody{Code: status, Error: msg})
		return
	}
	h.render(w, status, "error", errorPage{pageBase: h.base(r, ""), Status: status, Text: http.StatusText(status), Message: msg})
}

// failErr answers an error from the source with the status it means.
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, what string, err error) {
	status := statusOf(err)
	if status >= 500 {
		h.cfg.Logger.Warn("web: "+what, "err", err)
	}
	h.fail(w, r, status, what+": "+err.Error())
}

// statusOf maps the source's errors to HTTP statuses.
func statusOf(err error) int {
	var se *fleet.ServiceError
	switch {
	case errors.Is(err, errBadInput), errors.Is(err, fleet.ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, fleet.ErrUnknownJob), errors.Is(err, fleet.ErrEntryNotFound), errors.Is(err, fleet.ErrCalendarNotFound):
		return http.StatusNotFound
	case errors.Is(err, fleet.ErrNotSupported):
		return http.StatusNotImplemented
	case errors.Is(err, fleet.ErrJobBusy), errors.Is(err, fleet.ErrEntryConflict), errors.Is(err, fleet.ErrEntryExists),
		errors.Is(err, fleet.ErrCalendarConflict), errors.Is(err, fleet.ErrCalendarExists):
		return http.StatusConflict
	case errors.Is(err, fleet.ErrTooManyManualRuns):
		return http.StatusTooManyRequests
	case errors.Is(err, fleet.ErrNoReplica), errors.Is(err, fleet.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.As(err, &se):
		return http.StatusBadGateway
	}
	return http.StatusBadGateway
}

// errBadInput marks a request this handler refuses before asking the source.
var errBadInput = errors.New("bad request")
