package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/anarchon/anarchon/fleet"
)

func (c *cli) whyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "why JOB [--entry ENTRY] SLOT",
		Short: "Why did a slot run, or not: what was decided for it, by whom, and what is still open",
		Long: `why says what was decided for one slot of a job, or of one of its schedule entries,
from the decisions the fleet stored, as a replica that declares the job reads them: each
attempt and how it came to run (on time, buffered, a takeover after a lost lease, a
retry, catch-up after a pause, a backfill, a manual run and who asked), each decision
not to run it (skipped, late, missed, paused, the run limit) with its reason and the
replica that made it, and a deadline it missed. Then what is still open: a run holding
its lease, a buffered slot, a stored retry. A slot with no record says why that may be;
an instant that is no slot names the nearest slots. SLOT is an RFC 3339 time, as
anarchon history prints it (a manual run's, to the millisecond). --json prints the
replica's reply, with each step's kind and record.`,
		Example: `  anarchon why report 2026-10-24T09:00:00Z
  anarchon why tenants --entry acme 2026-10-24T09:30:00Z
  anarchon --json why report 2026-10-24T09:00:00.123Z`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("%s takes a JOB and a SLOT (anarchon history JOB lists them); got %d arguments", path(cmd), len(args))
			}
			return nil
		},
		ValidArgsFunction: c.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := whySlot(args[1])
			if err != nil {
				return err
			}
			in := fleet.WhyRequest{Entry: c.entry, Slot: slot}
			return c.request(cmd.Context(), func(ctx context.Context, client *fleet.Client) error {
				return c.why(ctx, client, args[0], in)
			})
		},
	}
	cmd.Flags().StringVar(&c.entry, "entry", "", "a slot of this schedule entry of JOB")
	return cmd
}

// whySlot reads SLOT: an RFC 3339 time, at millisecond precision.
func whySlot(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usagef("SLOT %q is not an RFC 3339 time, such as 2026-10-24T09:00:00Z (anarchon history prints the slots)", v)
	}
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		return time.Time{}, usagef("SLOT %q is finer than a millisecond: slots are whole milliseconds", v)
	}
	return t, nil
}

func (c *cli) why(ctx context.Context, client *fleet.Client, job string, in fleet.WhyRequest) error {
	w, err := client.Why(ctx, job, in)
	what := fmt.Sprintf("job %q", job)
	if in.Entry != "" {
		what = fmt.Sprintf("entry %q of job %q", in.Entry, job)
	}
	if err != nil {
		var nr *fleet.NoReplicaError
		if errors.As(err, &nr) && !nr.Checked && context.Cause(ctx) == nil {
			// The job is declared, yet no replica answers on the why subject.
			return fmt.Errorf("why of %s: no replica that declares job %q answers it: replicas of an earlier version do not; anarchon jobs shows which replicas are up",
				what, job)
		}
		return c.failed(ctx, client, "why of "+what, job, err)
	}
	if c.jsonOut() {
		return c.printJSON(w)
	}
	makeVisible(&w)
	fmt.Fprintf(c.stdout, "slot %s of %s (%s), as replica %s reads it:\n", stamp(w.Slot), visible(what), ago(w.Slot, w.Now), w.Instance)
	for i, st := range w.Steps {
		fmt.Fprintf(c.stdout, "%d. %s\n", i+1, st.Text)
	}
	return nil
}
