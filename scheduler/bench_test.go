package scheduler

import (
	"testing"
	"time"
)

// Slot computation runs once per slot on every instance, and a scheduler loop does
// nothing else between claims, so its cost is the floor of a slot's CPU cost.

var benchSink time.Time

func BenchmarkIntervalScheduleNext(b *testing.B) {
	for _, interval := range []time.Duration{time.Second, 10 * time.Second, time.Hour, 7*time.Minute + 13*time.Millisecond} {
		b.Run(interval.String(), func(b *testing.B) {
			s, err := NewIntervalSchedule(interval)
			if err != nil {
				b.Fatal(err)
			}
			t := time.Date(2025, 3, 30, 0, 59, 59, 999_000_000, time.UTC)
			b.ReportAllocs()
			for b.Loop() {
				t = s.Next(t)
			}
			benchSink = t
		})
	}
}

func BenchmarkCronScheduleNext(b *testing.B) {
	athens, err := time.LoadLocation("Europe/Athens")
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		expr string
		loc  *time.Location
	}{
		{"every-minute-utc", "* * * * *", time.UTC},
		{"every-second-utc", "* * * * * *", time.UTC},
		{"weekdays-9am-athens", "0 9 * * MON-FRI", athens},
		// 02:30 and 03:30 fall inside the spring-forward and fall-back hours in
		// Athens, which takes the daylight saving code path on the days of change.
		{"half-past-2-and-3-athens", "30 2,3 * * *", athens},
		{"dom-or-dow-utc", "0 0 1,15 * FRI", time.UTC},
		{"descriptor-hourly", "@hourly", time.UTC},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := ParseCron(c.expr, c.loc)
			if err != nil {
				b.Fatal(err)
			}
			// Walk the slots of one year, again and again: far-future dates cost more
			// (time zone rules are computed, not looked up), and are not what a
			// scheduler asks for.
			start := time.Date(2025, 3, 29, 0, 0, 0, 0, time.UTC)
			end := start.AddDate(1, 0, 0)
			t := start
			b.ReportAllocs()
			for b.Loop() {
				t = s.Next(t)
				if t.IsZero() || t.After(end) {
					t = start
				}
			}
			benchSink = t
		})
	}
}
