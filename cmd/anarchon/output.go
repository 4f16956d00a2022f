package main

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// maxWidth is how wide a default table is at most; -o wide has no limit.
const maxWidth = 100

// column is a table's column; a column that may shrink has its cells cut, with
// an ellipsis, when the table would be wider than maxWidth. A column that
// shrinks first (an error at the end of a row) gives up its width before the
// others, down to firstMin.
type column struct {
	name   string
	shrink bool
	first  bool
}

// firstMin is the narrowest a column that shrinks first gets before the others
// shrink.
const firstMin = 24

// table is rows of cells under a header, written with two spaces between
// columns and no trailing space.
type table struct {
	cols []column
	rows [][]string
}

func newTable(cols ...column) *table { return &table{cols: cols} }

// fixed and cut make columns.
func fixed(name string) column { return column{name: name} }
func cut(name string) column   { return column{name: name, shrink: true} }

// cutFirst makes a column that shrinks before the others.
func cutFirst(name string) column { return column{name: name, shrink: true, first: true} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// write writes the table within width columns (0: any width), shrinking the
// widest column that may shrink until it fits.
func (t *table) write(w io.Writer, width int) error {
	widths := make([]int, len(t.cols))
	for i, c := range t.cols {
		widths[i] = runes(c.name)
	}
	for _, r := range t.rows {
		for i, cell := range r {
			widths[i] = max(widths[i], runes(cell))
		}
	}
	if width > 0 {
		total := 2 * (len(widths) - 1)
		for _, n := range widths {
			total += n
		}
		for total > width {
			i := t.narrowest(widths)
			if i < 0 {
				break
			}
			widths[i]--
			total--
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.Reset()
		for i, cell := range cells {
			cell = fit(cell, widths[i])
			if i == len(cells)-1 {
				b.WriteString(cell)
				break
			}
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", widths[i]-runes(cell)+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	header := make([]string, len(t.cols))
	for i, c := range t.cols {
		header[i] = c.name
	}
	line(header)
	for _, r := range t.rows {
		line(r)
	}
	return nil
}

// narrowest picks the column to cut by one: the widest of those that shrink
// first while one is wider than firstMin, else the widest that may shrink; -1
// when none may.
func (t *table) narrowest(widths []int) int {
	best := -1
	for i, c := range t.cols {
		if c.first && widths[i] > max(runes(c.name), firstMin) && (best < 0 || widths[i] > widths[best]) {
			best = i
		}
	}
	if best >= 0 {
		return best
	}
	for i, c := range t.cols {
		if c.shrink && widths[i] > max(runes(c.name), 6) && (best < 0 || widths[i] > widths[best]) {
			best = i
		}
	}
	return best
}

// width is the table width the output asks for.
func (c *cli) width() int {
	if c.wide() {
		return 0
	}
	return maxWidth
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// fit cuts s to n runes, the last an ellipsis when it was cut.
func fit(s string, n int) string {
	if runes(s) <= n {
		return s
	}
	if n <= 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// One time format everywhere: RFC 3339 in UTC, with three digits of
// milliseconds when a time has any (a manual run's slot, an event), and relative
// times in tables.
const (
	stampFormat   = "2006-01-02T15:04:05Z07:00"
	stampMSFormat = "2006-01-02T15:04:05.000Z07:00"
)

// stamp writes a time in the one format; "-" for none.
func stamp(t time.Time) string {
	switch {
	case t.IsZero():
		return "-"
	case t.Nanosecond() < int(time.Millisecond):
		return t.UTC().Format(stampFormat)
	}
	return t.UTC().Format(stampMSFormat)
}

// ago writes t relative to now: "12s ago", "in 3m", "now"; "-" for none.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	switch {
	case d >= time.Second:
		return "in " + span(d)
	case d <= -time.Second:
		return span(-d) + " ago"
	}
	return "now"
}

// span writes a positive duration to two units at most: 45s, 3m12s, 5h3m, 2d4h.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
	if h == 0 {
		return fmt.Sprintf("%dd", days)
	}
	return fmt.Sprintf("%dd%dh", days, h)
}

// stampAgo writes both: the time, then how long ago or ahead.
func stampAgo(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return stamp(t) + " (" + ago(t, now) + ")"
}

// bare are the words a POSIX shell reads as themselves.
var bare = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes a word for a POSIX shell: as it is when nothing in it is
// special, else in single quotes, a single quote written '\”. Go's %q is no
// shell quoting: "$(touch x)" runs touch.
func shellQuote(s string) string {
	if bare.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// cmdline is an anarchon command line a person may paste: the command's words,
// its arguments, then flags given as name and value pairs, every word quoted
// for a POSIX shell. Flags are written --name=value; when an argument begins
// with a dash, the flags go first and the arguments after "--", so that no id
// is read as a flag.
func cmdline(path string, args []string, flags ...string) string {
	var fl, ar strings.Builder
	for i := 0; i+1 < len(flags); i += 2 {
		fl.WriteString(" --" + flags[i] + "=" + shellQuote(flags[i+1]))
	}
	dash := false
	for _, a := range args {
		dash = dash || strings.HasPrefix(a, "-")
		ar.WriteString(" " + shellQuote(a))
	}
	if dash {
		return "anarchon " + path + fl.String() + " --" + ar.String()
	}
	return "anarchon " + path + ar.String() + fl.String()
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) warn(format string, args ...any) {
	fmt.Fprintf(c.stderr, "warning: "+format+"\n", args...)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
