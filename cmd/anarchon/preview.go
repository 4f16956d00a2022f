package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/scheduler"
)

func (c *cli) previewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "preview JOB [ENTRY] [-n N] [--from T]",
		Short: "When will a job, or one of its schedule entries, run: its next slots and what each meets",
		Long: `preview lists a job's next slots, or one schedule entry's, as a replica that declares the
job will treat them: when each fires (after its spread), whether it runs, and why not or
what may change it: daylight saving, the start and end bounds, a pause (until when, by
whom, and whether catch-up runs the slot when it ends), the run limit, a run in progress
that the overlap policy may skip, buffer or cancel the slot for. A note that says "may"
depends on what cannot be known ahead, such as how long a run takes. -n says how many
slots (default 10, at most 1000); --from where to start, as an RFC 3339 time or a
duration from now (2h ahead, -2h back). --json prints the replica's reply.`,
		Example: `  anarchon preview report
  anarchon preview report -n 30 --from 2026-10-24T00:00:00Z
  anarchon preview tenants acme --from 24h`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || len(args) > 2 {
				return usagef("%s takes a JOB and, for one of its schedule entries, an ENTRY; got %d arguments", path(cmd), len(args))
			}
			return nil
		},
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.n < 0 || c.n > scheduler.MaxPreviewSlots {
				return usagef("-n %d is not between 1 and %d", c.n, scheduler.MaxPreviewSlots)
			}
			from, err := previewFrom(c.from, time.Now())
			if err != nil {
				return err
			}
			in := fleet.PreviewRequest{N: c.n, From: from}
			if len(args) == 2 {
				in.Entry = args[1]
			}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.preview(ctx, client, args[0], in)
			})
		},
	}
	cmd.Flags().IntVarP(&c.n, "n", "n", 0, "how many slots (default 10, at most 1000)")
	cmd.Flags().StringVar(&c.from, "from", "", "where the list starts (RFC 3339, or a duration from now: 2h, -2h)")
	return cmd
}

// previewFrom reads --from: an RFC 3339 time, or a duration from now (ahead,
// or back with a minus sign); zero when not given.
func previewFrom(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Time{}, usagef("--from %q is neither an RFC 3339 time nor a duration from now (2h, -2h)", v)
	}
	return now.Add(d), nil
}

func (c *cli) preview(ctx context.Context, client *fleet.Client, job string, in fleet.PreviewRequest) error {
	p, err := client.Preview(ctx, job, in)
	if err != nil {
		what := fmt.Sprintf("preview of job %q", job)
		if in.Entry != "" {
			what = fmt.Sprintf("preview of entry %q of job %q", in.Entry, job)
		}
		var nr *fleet.NoReplicaError
		if errors.As(err, &nr) && !nr.Checked && context.Cause(ctx) == nil {
			// The job is declared, yet no replica answers on the preview subject.
			return fmt.Errorf("%s: no replica that declares job %q answers previews: replicas of an earlier version do not serve them; anarchon jobs shows which replicas are up",
				what, job)
		}
		return c.failed(ctx, client, what, job, err)
	}
	if p.Cut {
		c.warn("the list stops before the year 10000, which the replies cannot carry")
	}
	if c.jsonOut() {
		return c.printJSON(p)
	}
	makeVisible(&p)
	if len(p.Slots) == 0 {
		of := fmt.Sprintf("%q", job)
		if in.Entry != "" {
			of = fmt.Sprintf("entry %q of %q", in.Entry, job)
		}
		from := "after now"
		if !in.From.IsZero() {
			from = "from " + stamp(in.From)
		}
		fmt.Fprintf(c.stdout, "no slots of %s %s: its schedule has none left\n", visible(of), from)
		return nil
	}
	t := newTable(fixed("SLOT"), fixed("IN"), fixed("RUNS"), cutFirst("NOTES"))
	for _, s := range p.Slots {
		runs := "yes"
		switch {
		case !s.Runs:
			runs = "no"
		case mayNote(s.Notes):
			runs = "maybe"
		}
		row := []string{stamp(s.Slot), ago(s.Slot, p.Now), runs}
		if len(s.Notes) == 0 {
			t.add(append(row, "")...)
			continue
		}
		for i, n := range s.Notes {
			if i > 0 {
				row = []string{"", "", ""}
			}
			t.add(append(row, n.Text)...)
		}
	}
	return t.write(c.stdout, c.width())
}

// mayNote reports whether a note says the slot may not run as planned.
func mayNote(notes []fleet.PreviewNote) bool {
	for _, n := range notes {
		if strings.HasPrefix(n.Kind, "may-") {
			return true
		}
	}
	return false
}
