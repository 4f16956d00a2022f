package scheduler_test

import (
	"testing"
	"time"

	"github.com/anarchon/anarchon/scheduler"
)

// FuzzParseCron: any input is either refused with an error or gives a schedule whose
// slots are strictly increasing, at millisecond precision. Run longer with
// go test -run '^$' -fuzz FuzzParseCron -fuzztime 1m ./scheduler/
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "*/15 * * * * *", "0 9 * * MON-FRI", "CRON_TZ=Europe/Athens 30 2 * * *",
		"@daily", "@every 1s", "0 0 30 2 *", "61 * * * *", "", "TZ=", "0 0 1,15 * 1-5", "L * * * *",
	} {
		f.Add(s, int64(1_800_000_000_000))
	}
	f.Fuzz(func(t *testing.T, expr string, ms int64) {
		s, err := scheduler.ParseCron(expr, nil)
		if err != nil {
			return
		}
		from := time.UnixMilli(ms % (1 << 44)).UTC()
		prev := from
		for range 5 {
			n := s.Next(prev)
			if n.IsZero() {
				return
			}
			if !n.After(prev) {
				t.Fatalf("%q: Next(%v) = %v, not after", expr, prev, n)
			}
			if n.Nanosecond()%int(time.Millisecond) != 0 {
				t.Fatalf("%q: slot %v is not at millisecond precision", expr, n)
			}
			prev = n
		}
	})
}

// FuzzIntervalNext: slots are multiples of the interval since the epoch, strictly after t.
func FuzzIntervalNext(f *testing.F) {
	f.Add(int64(time.Second), int64(1_800_000_000_123))
	f.Add(int64(7*time.Millisecond), int64(-5))
	f.Fuzz(func(t *testing.T, interval, ms int64) {
		s, err := scheduler.NewIntervalSchedule(time.Duration(interval))
		if err != nil {
			return
		}
		from := time.UnixMilli(ms % (1 << 44))
		n := s.Next(from)
		if n.IsZero() {
			return
		}
		if !n.After(from) || n.Sub(from) > s.Interval {
			t.Fatalf("Next(%v) = %v with interval %v", from, n, s.Interval)
		}
		if n.UnixMilli()%s.Interval.Milliseconds() != 0 {
			t.Fatalf("slot %v is not a multiple of %v", n, s.Interval)
		}
	})
}
