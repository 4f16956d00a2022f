package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/fleet"
)

// calendarFlags are the flags of calendar set and rm.
type calendarFlags struct {
	dates, ranges, yearly, weekdays []string
	zone, description               string
	rev                             uint64
}

// calendarSpecNames are the flags of set that change a calendar.
var calendarSpecNames = []string{"date", "range", "yearly", "weekday", "zone", "description"}

// calendarArgs is the Args of a calendar action about one calendar.
func calendarArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usagef("%s needs a calendar NAME (anarchon calendar ls lists them)", path(cmd))
	case len(args) > 1:
		return usagef("%s takes one calendar NAME, got %d arguments (quote a name with spaces)", path(cmd), len(args))
	}
	if err := backend.ValidateCalendarName(args[0]); err != nil {
		return usagef("calendar %s", strings.TrimPrefix(err.Error(), backend.ErrInvalidCalendar.Error()+": "))
	}
	return nil
}

func (c *cli) calendarCommand() *cobra.Command {
	group := &cobra.Command{
		Use:   "calendar",
		Short: "Calendars of days on which slots are excluded: ls, show, set, rm",
		Long: `calendar operates the calendars stored in the backend: named sets of days (dates, ranges,
yearly days, weekdays) on which the slots of the jobs and schedule entries that name them
are not run but recorded excluded. Every replica follows a change within a second; it
decides the slots claimed after it.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return groupArgs(cmd, args) },
	}
	run := func(action string) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) > 0 {
				name = args[0]
			}
			if action == "set" && !slices.ContainsFunc(calendarSpecNames, c.given) {
				return usagef("calendar set changes nothing without a flag: give --date, --range, --yearly, --weekday, --zone or --description")
			}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.calendar(ctx, client, action, name)
			})
		}
	}
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the calendars, ordered by name",
		Args:    noArgs,
		RunE:    run("ls"),
	}
	show := &cobra.Command{
		Use:     "show NAME",
		Aliases: []string{"get"},
		Short:   "One calendar with every day it has",
		Args:    calendarArgs,
		RunE:    run("show"),
	}
	set := &cobra.Command{
		Use:   "set NAME [--date D | --range A..B | --yearly MM-DD | --weekday W]...",
		Short: "Create a calendar, or change the flags given on it",
		Long: `set creates the calendar, or changes it as read: each list given replaces the list stored
(--date= empties it), the others stay. It is stored only if nobody changed it since it was
read, or since --rev N; --rev 0 only creates.`,
		Example: `  anarchon calendar set holidays --zone Europe/Athens --date 2026-12-25,2026-12-26 \
    --range 2026-08-01..2026-08-15 --yearly 01-01 --description "office closed"
  anarchon calendar set weekends --weekday sat --weekday sun
  anarchon calendar set holidays --date 2026-12-25 --rev 4`,
		Args: calendarArgs,
		RunE: run("set"),
	}
	p := &c.cal
	fs := set.Flags()
	fs.StringSliceVar(&p.dates, "date", nil, "a day, YYYY-MM-DD (repeat, or separate with commas)")
	fs.StringSliceVar(&p.ranges, "range", nil, "days FROM..TO, both included (YYYY-MM-DD..YYYY-MM-DD)")
	fs.StringSliceVar(&p.yearly, "yearly", nil, "a day of every year, MM-DD")
	fs.StringSliceVar(&p.weekdays, "weekday", nil, "a day of every week: sun, mon, ..., sat")
	fs.StringVar(&p.zone, "zone", "", "the IANA zone its days are counted in (empty: each schedule's own)")
	fs.StringVar(&p.description, "description", "", "what the calendar is for")
	fs.Uint64Var(&p.rev, "rev", 0, "the revision the change is based on (0: create only)")
	rm := &cobra.Command{
		Use:     "rm NAME [--rev N]",
		Aliases: []string{"delete"},
		Short:   "Remove a calendar",
		Args:    calendarArgs,
		RunE:    run("rm"),
	}
	rm.Flags().Uint64Var(&p.rev, "rev", 0, "remove it only if its revision is this")
	group.AddCommand(ls, show, set, rm)
	return group
}

// calendar runs one action of the calendar command.
func (c *cli) calendar(ctx context.Context, client *fleet.Client, action, name string) error {
	switch action {
	case "ls":
		return c.calendarList(ctx, client)
	case "show":
		r, err := client.Calendar(ctx, name)
		if err != nil {
			return c.calendarFailed(ctx, client, fmt.Sprintf("calendar show %q", name), err)
		}
		return c.calendarShow(r)
	case "set":
		return c.calendarSet(ctx, client, name)
	}
	op := fmt.Sprintf("calendar rm %q", name)
	r, err := client.DeleteCalendar(ctx, fleet.DeleteCalendarRequest{Name: name, Rev: c.cal.rev, By: c.by})
	if err != nil {
		return c.calendarFailed(ctx, client, op, err)
	}
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	fmt.Fprintf(c.stdout, "removed calendar %q on %s; every replica follows within a second (the jobs that name it exclude nothing by it)\n",
		r.Name, r.Instance)
	return nil
}

// calendarSet creates the calendar, or changes the flags given on it as read.
func (c *cli) calendarSet(ctx context.Context, client *fleet.Client, name string) error {
	op := fmt.Sprintf("calendar set %q", name)
	cal, rev := fleet.Calendar{Name: name}, uint64(0)
	if !c.given("rev") || c.cal.rev != 0 {
		cur, err := client.Calendar(ctx, name)
		switch {
		case errors.Is(err, fleet.ErrCalendarNotFound) && !c.given("rev"):
		case err != nil:
			return c.calendarFailed(ctx, client, op, err)
		default:
			cal, rev = cur.Calendar, cur.Calendar.Revision
		}
	}
	if c.given("rev") {
		rev = c.cal.rev
	}
	cal, err := c.applyCalendar(cal)
	if err != nil {
		return err
	}
	r, err := client.PutCalendar(ctx, fleet.PutCalendarRequest{Calendar: cal, Rev: rev, By: c.by})
	if err != nil {
		return c.calendarFailed(ctx, client, op, err)
	}
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	what := "updated"
	if rev == 0 {
		what = "created"
	}
	fmt.Fprintf(c.stdout, "%s calendar %q on %s: %s, revision %d; every replica follows within a second\n",
		what, r.Calendar.Name, r.Instance, calendarDays(r.Calendar), r.Calendar.Revision)
	return nil
}

// applyCalendar changes cal by the flags given; it checks what the command
// can, the replica the rest.
func (c *cli) applyCalendar(cal fleet.Calendar) (fleet.Calendar, error) {
	p, g := &c.cal, c.given
	if g("date") {
		cal.Dates = p.dates
	}
	if g("yearly") {
		cal.Yearly = p.yearly
	}
	if g("range") {
		cal.Ranges = nil
		for _, r := range p.ranges {
			from, to, ok := strings.Cut(r, "..")
			if !ok {
				return cal, usagef("--range %q: want FROM..TO (2026-08-01..2026-08-15)", r)
			}
			cal.Ranges = append(cal.Ranges, fleet.DateRange{From: from, To: to})
		}
	}
	if g("weekday") {
		cal.Weekdays = nil
		for _, w := range p.weekdays {
			d, err := fleet.ParseWeekday(w)
			if err != nil {
				return cal, usagef("--%v", err)
			}
			cal.Weekdays = append(cal.Weekdays, strings.ToLower(d.String()))
		}
	}
	if g("zone") {
		cal.Zone = p.zone
	}
	if g("description") {
		cal.Description = p.description
	}
	return cal, nil
}

// calendarDays says how many days of each kind a calendar has.
func calendarDays(cal fleet.Calendar) string {
	s := fmt.Sprintf("%s, %s, %s", plural(len(cal.Dates), "date"), plural(len(cal.Ranges), "range"), plural(len(cal.Yearly), "yearly day"))
	if len(cal.Weekdays) > 0 {
		s += ", every " + strings.Join(cal.Weekdays, ", ")
	}
	if cal.Zone != "" {
		s += " (" + cal.Zone + ")"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (c *cli) calendarList(ctx context.Context, client *fleet.Client) error {
	r, err := client.Calendars(ctx)
	if err != nil {
		return c.calendarFailed(ctx, client, "calendar ls", err)
	}
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	if len(r.Calendars) == 0 {
		fmt.Fprintln(c.stdout, "no calendars")
		return nil
	}
	now := time.Now()
	var t *table
	if c.wide() {
		t = newTable(fixed("NAME"), fixed("ZONE"), fixed("DATES"), fixed("RANGES"), fixed("YEARLY"), fixed("WEEKDAYS"), fixed("REV"),
			fixed("BY"), fixed("AT"), fixed("DESCRIPTION"))
	} else {
		t = newTable(cut("NAME"), fixed("ZONE"), fixed("DATES"), fixed("RANGES"), fixed("YEARLY"), fixed("WEEKDAYS"), fixed("REV"),
			fixed("CHANGED"), cut("DESCRIPTION"))
	}
	for _, s := range r.Calendars {
		days := func(n int) string { return fmt.Sprint(n) }
		weekdays := make([]string, len(s.Weekdays))
		for i, w := range s.Weekdays {
			weekdays[i] = shorten(w, 3)
		}
		if c.wide() {
			t.add(s.Name, orDash(s.Zone), days(s.Dates), days(s.Ranges), days(s.Yearly), orDash(strings.Join(weekdays, ",")),
				fmt.Sprint(s.Revision), orDash(s.By), stamp(s.At), orDash(s.Description))
			continue
		}
		t.add(s.Name, orDash(s.Zone), days(s.Dates), days(s.Ranges), days(s.Yearly), orDash(strings.Join(weekdays, ",")),
			fmt.Sprint(s.Revision), ago(s.At, now), orDash(s.Description))
	}
	return t.write(c.stdout, c.width())
}

func (c *cli) calendarShow(r fleet.CalendarReply) error {
	if c.jsonOut() {
		return c.printJSON(r)
	}
	makeVisible(&r)
	cal, now := r.Calendar, time.Now()
	kv := &pairs{}
	kv.add("calendar", cal.Name)
	kv.add("zone", orDash(cal.Zone))
	kv.add("description", orDash(cal.Description))
	kv.add("weekdays", orDash(strings.Join(cal.Weekdays, ", ")))
	kv.add("dates", listText(cal.Dates))
	ranges := make([]string, len(cal.Ranges))
	for i, rg := range cal.Ranges {
		ranges[i] = rg.From + ".." + rg.To
	}
	kv.add("ranges", listText(ranges))
	kv.add("yearly", listText(cal.Yearly))
	kv.add("revision", fmt.Sprintf("%d, written %s (on %s)", cal.Revision, stampAgo(cal.At, now), r.Instance))
	kv.add("changed by", orDash(cal.By))
	kv.write(c.stdout)
	return nil
}

// listText is a list of days, its count first.
func listText(days []string) string {
	if len(days) == 0 {
		return "-"
	}
	return fmt.Sprintf("(%d) %s", len(days), strings.Join(days, " "))
}

// calendarFailed says why a calendar request failed, in the command's words.
func (c *cli) calendarFailed(ctx context.Context, client *fleet.Client, op string, err error) error {
	var se *fleet.ServiceError
	if context.Cause(ctx) == nil && errors.As(err, &se) {
		at := ""
		if se.Instance != "" {
			at = " (replica " + se.Instance + ")"
		}
		switch {
		case errors.Is(err, fleet.ErrCalendarNotFound):
			return fmt.Errorf("%s: no calendar has that name%s; anarchon calendar ls lists them", op, at)
		case errors.Is(err, fleet.ErrCalendarExists):
			return fmt.Errorf("%s: a calendar of that name exists%s; change it with anarchon calendar set without --rev 0", op, at)
		case errors.Is(err, fleet.ErrCalendarConflict):
			return fmt.Errorf("%s: the calendar was changed by another writer since the revision this is based on%s; nothing was stored: read it again with anarchon calendar show", op, at)
		}
	}
	return c.failed(ctx, client, op, "", err)
}
