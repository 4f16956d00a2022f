package web

import (
	"bytes"
	"embed"
	"hash/fnv"
	"html/template"
	"net/http"
	"strconv"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/style.css
var styleCSS []byte

// styleETag identifies this build's stylesheet.
var styleETag = `"` + strconv.FormatUint(fnv64(styleCSS), 36) + `"`

// parsePages parses the embedded templates; they are part of the binary, so an
// error is a bug in this package, caught by its tests.
func parsePages(funcs template.FuncMap) *template.Template {
	return template.Must(template.New("pages").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
}

// serveStyle serves the embedded stylesheet.
func serveStyle(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("ETag", styleETag)
	http.ServeContent(w, r, "style.css", time.Time{}, bytes.NewReader(styleCSS))
}

func fnv64(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}
