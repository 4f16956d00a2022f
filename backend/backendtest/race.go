package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// raceRound is what one round of the race saw.
type raceRound struct {
	Round int
	// Wins counts the claims answered true.
	Wins int
	// Winner is one winning claim, with the index of the backend value it went
	// through.
	Winner      backend.ClaimInput
	WinnerValue int
	// RepeatWon says whether the winner's claim, repeated through another backend
	// value (another process retrying it), won again.
	RepeatWon bool
}

// withDefaults fills in the options left zero.
func (o Options) withDefaults() Options {
	if o.Rounds <= 0 {
		o.Rounds = 20
	}
	if o.Claimers <= 0 {
		o.Claimers = 16
	}
	return o
}

// testRace is the Race case: one backend value per claimer, from newBackend, each
// standing for one process of a replicated service.
func testRace(t *testing.T, newBackend func(t *testing.T) backend.Backend, o Options) {
	faults, _, err := raceSection(Context(t), func() (backend.Backend, error) {
		return open(t, newBackend), nil
	}, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faults {
		t.Error(f)
	}
}

// raceSection is the Race case without a testing.T, so that a test can show it
// catches a backend that breaks the rule. It makes one backend value per claimer
// with newBackend, calls Init and PrepareJob on each, runs o.Rounds rounds of
// o.Claimers concurrent claims of a fresh slot (each claimer through its own
// value), and returns what broke the rule, one line per fault (none when the
// backend passes), with what each round saw. err is a failed call, not a broken
// rule.
func raceSection(ctx context.Context, newBackend func() (backend.Backend, error), o Options) (faults []string, rounds []raceRound, err error) {
	o = o.withDefaults()
	job := JobName("race")
	l := limits(job)
	bs := make([]backend.Backend, o.Claimers)
	for i := range bs {
		b, err := newBackend()
		if err != nil {
			return nil, nil, fmt.Errorf("newBackend for claimer %d: %w", i, err)
		}
		if b == nil {
			return nil, nil, fmt.Errorf("newBackend for claimer %d returned nil", i)
		}
		if err := b.Init(ctx); err != nil {
			return nil, nil, fmt.Errorf("claimer %d's backend: Init: %w", i, err)
		}
		if err := b.PrepareJob(ctx, l); err != nil {
			return nil, nil, fmt.Errorf("PrepareJob on claimer %d's backend: %w", i, err)
		}
		bs[i] = b
	}
	for round := range o.Rounds {
		r, err := raceOnce(ctx, bs, job, slotAt(round))
		if err != nil {
			return faults, rounds, fmt.Errorf("round %d: %w", round, err)
		}
		r.Round = round
		rounds = append(rounds, r)
	}
	return raceFaults(rounds, o.Claimers), rounds, nil
}

// raceOnce has every value in bs claim slot of job with its own token, all released
// together, and then repeats one winning claim through another value.
func raceOnce(ctx context.Context, bs []backend.Backend, job string, slot time.Time) (raceRound, error) {
	var (
		mu   sync.Mutex
		r    raceRound
		errs = make([]error, len(bs))
		wg   sync.WaitGroup
		gate = make(chan struct{})
	)
	for i, b := range bs {
		wg.Go(func() {
			<-gate
			in := claim(job, slot, Token(), fmt.Sprintf("i%d", i))
			won, err := b.Claim(ctx, in)
			if err != nil {
				errs[i] = fmt.Errorf("claimer %d: Claim: %w", i, err)
				return
			}
			if won {
				mu.Lock()
				r.Wins++
				r.Winner, r.WinnerValue = in, i
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	if r.Wins == 0 {
		return r, nil
	}
	// The winner asking again, through another process, is still the winner.
	again := bs[(r.WinnerValue+1)%len(bs)]
	won, err := again.Claim(ctx, r.Winner)
	if err != nil {
		return r, fmt.Errorf("the winner's repeated Claim: %w", err)
	}
	r.RepeatWon = won
	return r, nil
}

// raceFaults judges the rounds: exactly one winner among claimers in each, and the
// winner's repeated claim wins again.
func raceFaults(rounds []raceRound, claimers int) []string {
	var faults []string
	for _, r := range rounds {
		if r.Wins != 1 {
			faults = append(faults, fmt.Sprintf("round %d: %d of %d concurrent claims won; exactly one must (each claimer had its own backend value)", r.Round, r.Wins, claimers))
		}
		if r.Wins > 0 && !r.RepeatWon {
			faults = append(faults, fmt.Sprintf("round %d: the winner's claim repeated through another backend value lost; the winning token must win again", r.Round))
		}
	}
	return faults
}
