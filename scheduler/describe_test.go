package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
)

func TestDescribeSchedule(t *testing.T) {
	for in, want := range map[string]string{
		"every 10s":                             "every 10s (aligned to UTC)",
		"CRON_TZ=Europe/Athens 0 9 * * MON-FRI": "at 09:00 on MON-FRI (Europe/Athens)",
		"CRON_TZ=UTC 30 2 * * *":                "at 02:30 every day (UTC)",
		"CRON_TZ=UTC */10 * * * * *":            "every 10 seconds every day (UTC)",
		"CRON_TZ=America/New_York 15 * * * *":   "every hour at :15 every day (America/New_York)",
		"CRON_TZ=UTC */5 * * * *":               "every 5 minutes every day (UTC)",
		"CRON_TZ=UTC 0 3 1 * *":                 "at 03:00 on day 1 of the month (UTC)",
		"CRON_TZ=UTC 0 0 1 1 *":                 "cron 0 0 1 1 * (UTC)",
		"CRON_TZ=UTC 0 */2 * * *":               "cron 0 */2 * * * (UTC)",
		"TZ=Asia/Tokyo @daily":                  "every day at 00:00 (Asia/Tokyo)",
		"CRON_TZ=UTC @every 90s":                "every 90s (UTC)",
		"CRON_TZ=UTC 5 30 9 * * *":              "at 09:30:05 every day (UTC)",
		"":                                      "–",
		"CRON_TZ=UTC <b>":                       "cron <b> (UTC)", // the status page's template escapes it
		"bogus":                                 "cron bogus (UTC)",
		"every 10s from 2030-01-01T00:00:00.000Z until 2030-02-01T00:00:00.000Z": "every 10s (aligned to UTC), from 2030-01-01T00:00:00.000Z until 2030-02-01T00:00:00.000Z",
		"CRON_TZ=UTC 30 2 * * * until 2030-02-01T00:00:00.000Z":                  "at 02:30 every day (UTC), until 2030-02-01T00:00:00.000Z",
		"once at 2030-01-01T12:00:00.000Z":                                       "once at 2030-01-01T12:00:00.000Z",
	} {
		assert.Equal(t, want, scheduler.DescribeSchedule(in), in)
	}
}

// The words are the same for a schedule and for the text its String writes.
func TestDescribeScheduleOfSchedules(t *testing.T) {
	athens, err := time.LoadLocation("Europe/Athens")
	require.NoError(t, err)
	c, err := scheduler.ParseCron("0 9 * * MON-FRI", athens)
	require.NoError(t, err)
	assert.Equal(t, "at 09:00 on MON-FRI (Europe/Athens)", scheduler.DescribeSchedule(c.String()))
	i, err := scheduler.NewIntervalSchedule(90 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "every 1m30s (aligned to UTC)", scheduler.DescribeSchedule(i.String()))
}

func ExampleDescribeSchedule() {
	fmt.Println(scheduler.DescribeSchedule("every 10s"))
	fmt.Println(scheduler.DescribeSchedule("CRON_TZ=Europe/Athens 0 9 * * MON-FRI"))
	fmt.Println(scheduler.DescribeSchedule("CRON_TZ=UTC 0 */2 * * *"))
	// Output:
	// every 10s (aligned to UTC)
	// at 09:00 on MON-FRI (Europe/Athens)
	// cron 0 */2 * * * (UTC)
}
