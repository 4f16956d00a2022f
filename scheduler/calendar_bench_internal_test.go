package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/backend/memory"
)

// BenchmarkNoteCalendarsOneChanged is what a replica does on every calendar
// change: it takes the whole list from the watch, compares each calendar
// with its view and compiles the changed one. 1,000 calendars (the store's
// cap) of 100 and of 2,000 dates each.
func BenchmarkNoteCalendarsOneChanged(b *testing.B) {
	for _, dates := range []int{100, 2000} {
		b.Run(fmt.Sprintf("1000x%d", dates), func(b *testing.B) {
			s, err := New(Config{Backend: memory.New(), Instance: "A"})
			if err != nil {
				b.Fatal(err)
			}
			day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
			all := make([]backend.Calendar, backend.MaxCalendars)
			for i := range all {
				c := backend.Calendar{Name: fmt.Sprintf("cal-%04d", i), Revision: uint64(i + 1)}
				for d := range dates {
					c.Dates = append(c.Dates, day.AddDate(0, 0, d).Format(time.DateOnly))
				}
				all[i] = c
			}
			s.noteCalendars(all)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				all[500].Revision = uint64(2000 + i)
				s.noteCalendars(all)
			}
		})
	}
}
