package kvlease_test

import (
	"testing"
	"time"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/kvlease"
)

// Latency of the lease operations on the embedded servers: a single server reached
// in-process, and an R3 bucket in a 3-node cluster over loopback TCP.
//
//	go test -run '^$' -bench . -benchtime 300x ./kvlease

func benchStores(b *testing.B) map[string]*kvlease.Store {
	return map[string]*kvlease.Store{
		"single": newStore(b, singleJS(b), kvlease.WithBucket("bench_r1")),
		"R3":     newStore(b, clusterJS(b), kvlease.WithBucket("bench_r3"), kvlease.WithReplicas(3)),
	}
}

// BenchmarkClaimWin: first claims of fresh slots (2 compare-and-set writes, no read).
func BenchmarkClaimWin(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job := "bench " + token()
			slot := time.UnixMilli(1_900_000_000_000)
			for b.Loop() {
				slot = slot.Add(time.Second)
				res, err := s.Claim(b.Context(), claimOf(job, slot, token(), time.Minute))
				if err != nil || res.Outcome != backend.OutcomeWon {
					b.Fatalf("claim: %v %v", res.Outcome, err)
				}
			}
		})
	}
}

// BenchmarkClaimWinLimited: first claims of fresh slots of a job with a run
// limit (RunClaim.MaxRuns): not blind, a read of the run's keys and the job
// key, then the lease key, the job key and the run record.
func BenchmarkClaimWinLimited(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job := "bench " + token()
			slot := time.UnixMilli(1_900_000_000_000)
			for b.Loop() {
				slot = slot.Add(time.Second)
				in := claimOf(job, slot, token(), time.Minute)
				in.MaxRuns = 1 << 30
				res, err := s.Claim(b.Context(), in)
				if err != nil || res.Outcome != backend.OutcomeWon {
					b.Fatalf("claim: %v %v", res.Outcome, err)
				}
			}
		})
	}
}

// BenchmarkClaimRunning: a backup's claim of a held slot (its lost write, then one
// read of both keys on a single server; two leader reads on R3).
func BenchmarkClaimRunning(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job, slot := "bench "+token(), time.UnixMilli(1_900_000_000_000)
			if _, err := s.Claim(b.Context(), claimOf(job, slot, token(), time.Minute)); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				res, err := s.Claim(b.Context(), claimOf(job, slot, token(), time.Minute))
				if err != nil || res.Outcome != backend.OutcomeRunning {
					b.Fatalf("claim: %v %v", res.Outcome, err)
				}
			}
		})
	}
}

// BenchmarkHeartbeat: the holder's heartbeat (1 compare-and-set write).
func BenchmarkHeartbeat(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job, slot, tok := "bench "+token(), time.UnixMilli(1_900_000_000_000), token()
			if _, err := s.Claim(b.Context(), claimOf(job, slot, tok, time.Minute)); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := s.Heartbeat(b.Context(), backend.RunKey{Job: job, Slot: slot, Token: tok}, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimFinish: a whole run's store traffic: claim, finish (without a
// RecordWriter, so no record is written).
func BenchmarkClaimFinish(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job := "bench " + token()
			slot := time.UnixMilli(1_900_000_000_000)
			for b.Loop() {
				slot = slot.Add(time.Second)
				tok := token()
				if _, err := s.Claim(b.Context(), claimOf(job, slot, tok, time.Minute)); err != nil {
					b.Fatal(err)
				}
				if err := s.Finish(b.Context(), backend.RunKey{Job: job, Slot: slot, Token: tok}, backend.StatusOK); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimBuffered: under OverlapBufferOne, a first claim buffered behind a
// held run, then its withdrawal (Finish by its token), so the cap is free again.
//
//	go test -run '^$' -bench 'Buffer' -benchtime 100x ./kvlease
func BenchmarkClaimBuffered(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job, slot := "bench "+token(), time.UnixMilli(1_900_000_000_000)
			held := claimOf(job, slot, token(), time.Minute)
			held.Overlap = backend.OverlapBufferOne
			if res, err := s.Claim(b.Context(), held); err != nil || res.Outcome != backend.OutcomeWon {
				b.Fatalf("claim: %v %v", res.Outcome, err)
			}
			for b.Loop() {
				slot = slot.Add(time.Second)
				in := claimOf(job, slot, token(), time.Minute)
				in.Overlap = backend.OverlapBufferOne
				if res, err := s.Claim(b.Context(), in); err != nil || res.Outcome != backend.OutcomeBuffered {
					b.Fatalf("claim: %v %v", res.Outcome, err)
				}
				if err := s.Finish(b.Context(), in.Key(), backend.StatusCancelled); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimFromBuffer: under OverlapBufferOne, one cycle of a buffer: a slot
// buffered behind the held run, the run's finish, and the claim that takes the
// buffered slot (which then holds the job).
func BenchmarkClaimFromBuffer(b *testing.B) {
	for name, s := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			job, slot := "bench "+token(), time.UnixMilli(1_900_000_000_000)
			held := claimOf(job, slot, token(), time.Minute)
			held.Overlap = backend.OverlapBufferOne
			if res, err := s.Claim(b.Context(), held); err != nil || res.Outcome != backend.OutcomeWon {
				b.Fatalf("claim: %v %v", res.Outcome, err)
			}
			for b.Loop() {
				slot = slot.Add(time.Second)
				in := claimOf(job, slot, token(), time.Minute)
				in.Overlap = backend.OverlapBufferOne
				if res, err := s.Claim(b.Context(), in); err != nil || res.Outcome != backend.OutcomeBuffered {
					b.Fatalf("buffer: %v %v", res.Outcome, err)
				}
				if err := s.Finish(b.Context(), held.Key(), backend.StatusOK); err != nil {
					b.Fatal(err)
				}
				in.Token = token()
				if res, err := s.Claim(b.Context(), in); err != nil || res.Outcome != backend.OutcomeWon {
					b.Fatalf("take: %v %v", res.Outcome, err)
				}
				held = in
			}
		})
	}
}
