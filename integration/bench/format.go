package main

import (
	"fmt"
	"strings"
	"time"
)

// dur prints a duration with three significant digits in a unit a reader compares
// at a glance (µs below a millisecond, ms below a second).
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// mib prints bytes in MiB; unknown (negative) prints n/a.
func mib(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// signedMiB prints a memory delta.
func signedMiB(b int64) string {
	return fmt.Sprintf("%+.1f MiB", float64(b)/(1<<20))
}

func perOp(n uint64, ops int) string {
	if ops == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(ops))
}

func mark(ok bool) string {
	if ok {
		return "✅"
	}
	return "❌"
}

// table writes a markdown table.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" ")
			b.WriteString(strings.ReplaceAll(c, "|", "\\|"))
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	row(t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = "---"
	}
	row(sep)
	for _, r := range t.rows {
		row(r)
	}
	return b.String()
}

// runColumns starts a table with one column per run under corner, and returns it
// with a function that adds a row of f's value for each run (left out when every
// cell is empty).
func runColumns(corner string, runs []*loadResult) (*table, func(name string, f func(l *loadResult) string)) {
	head := []string{corner}
	for _, l := range runs {
		head = append(head, l.name)
	}
	t := newTable(head...)
	return t, func(name string, f func(l *loadResult) string) {
		cells := []string{name}
		empty := true
		for _, l := range runs {
			c := f(l)
			empty = empty && c == ""
			cells = append(cells, c)
		}
		if !empty {
			t.add(cells...)
		}
	}
}
