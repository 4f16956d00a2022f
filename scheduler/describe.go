package scheduler

import (
	"strconv"
	"strings"
)

// DescribeSchedule says a schedule in words, with the zone its slots are computed
// in. It reads the text the schedule's String method writes (JobLimits.Schedule,
// JobInfo's, and the fleet's "schedule" field). "every 10s" is "every 10s (aligned
// to UTC)"; "CRON_TZ=Europe/Athens 0 9 * * MON-FRI" is "at 09:00 on MON-FRI
// (Europe/Athens)". An expression it cannot put in words is shown as it is, with
// its zone: "cron 0 */2 * * * (UTC)"; an empty schedule is "–". A DST policy
// other than the default follows the zone ("(America/New_York; DST
// repeated=both)"), bounds follow the words (", from T until T"), and a one-time
// job is "once at T".
//
// It is the one description of a schedule: the anarchon command's jobs table,
// the status page and the fleet's JSON ("schedule_text") all use it, while the
// String form stays the schedule's identity (what replicas compare).
func DescribeSchedule(s string) string {
	if s == "" {
		return "–"
	}
	s, bounds := describeBounds(s)
	if inner, spread, ok := strings.Cut(s, spreadText); ok {
		s, bounds = inner, spreadText+spread+bounds
	}
	if s == noSchedule.String(noSchedule{}) {
		return "its schedule entries" + bounds
	}
	if strings.HasPrefix(s, "once at ") {
		return s + bounds
	}
	if strings.HasPrefix(s, "every ") {
		return s + " (aligned to UTC)" + bounds
	}
	zone := "UTC"
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			zone, s, _ = strings.Cut(rest, " ")
			break
		}
	}
	if inner, dst, ok := strings.Cut(s, dstText); ok {
		s, zone = inner, zone+dstText+dst
	}
	return cronWords(strings.TrimSpace(s)) + " (" + zone + ")" + bounds
}

var descriptors = map[string]string{
	"@yearly": "every 1 January at 00:00", "@annually": "every 1 January at 00:00",
	"@monthly": "on day 1 of every month at 00:00", "@weekly": "every Sunday at 00:00",
	"@daily": "every day at 00:00", "@midnight": "every day at 00:00", "@hourly": "every hour at :00",
}

func cronWords(expr string) string {
	if d, ok := descriptors[expr]; ok {
		return d
	}
	if every, ok := strings.CutPrefix(expr, "@every "); ok {
		return "every " + every
	}
	f := strings.Fields(expr)
	sec := "0"
	switch len(f) {
	case 6:
		sec, f = f[0], f[1:]
	case 5:
	default:
		return "cron " + expr
	}
	minute, hour, dom, month, dow := f[0], f[1], f[2], f[3], f[4]
	var when string
	switch {
	case isNum(sec) && isNum(minute) && isNum(hour):
		when = "at " + pad(hour) + ":" + pad(minute)
		if sec != "0" {
			when += ":" + pad(sec)
		}
	case isNum(sec) && isNum(minute) && hour == "*":
		when = "every hour at :" + pad(minute)
	case isNum(sec) && strings.HasPrefix(minute, "*/") && hour == "*":
		when = "every " + minute[2:] + " minutes"
	case strings.HasPrefix(sec, "*/") && minute == "*" && hour == "*":
		when = "every " + sec[2:] + " seconds"
	case sec == "*" && minute == "*" && hour == "*":
		when = "every second"
	case sec == "0" && minute == "*" && hour == "*":
		when = "every minute"
	default:
		return "cron " + expr
	}
	switch {
	case dom == "*" && month == "*" && dow == "*":
		return when + " every day"
	case dom == "*" && month == "*":
		return when + " on " + dow
	case dow == "*" && month == "*":
		return when + " on day " + dom + " of the month"
	}
	return "cron " + expr
}

func isNum(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

func pad(s string) string {
	if len(s) == 1 {
		return "0" + s
	}
	return s
}
