package jetstream

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/internal/natsutil"
)

// The claim benchmarks compare a claim, won or lost, with a plain JetStream publish
// to the same server (file storage), in process and over loopback TCP:
//
//	go test -run '^$' -bench 'Claim|RawPublish' -benchtime 20000x ./jetstream/
//
// Each reports the mean (ns/op) and the median and 99th percentile of single
// operations (p50-µs, p99-µs).

type benchEnv struct {
	js natsjs.JetStream
	b  *Backend
}

func benchTransports(b *testing.B, opts []Option, run func(b *testing.B, env benchEnv)) {
	for _, tr := range []string{"inproc", "tcp"} {
		b.Run(tr, func(b *testing.B) {
			s := natstest.Server(b, embedded.Options{Listen: "127.0.0.1:0"})
			var nc *nats.Conn
			if tr == "tcp" {
				nc = natstest.URL(b, s.ClientURL())
			} else {
				nc = natstest.Conn(b, s)
			}
			js := natstest.JetStream(b, nc)
			run(b, benchEnv{js: js, b: newBackend(b, js, opts...)})
		})
	}
}

// timed runs op b.N times and reports percentiles of its latency.
func timed(b *testing.B, op func(i int)) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		op(i)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

func prepareBench(b *testing.B, env benchEnv) string {
	job := jobName("bench")
	require.NoError(b, env.b.PrepareJob(context.Background(), backend.JobLimits{Job: job, Retention: backend.Retention{Size: 100}}))
	return job
}

// BenchmarkClaimWin claims a fresh slot each time: one publish, stored.
func BenchmarkClaimWin(b *testing.B) {
	benchTransports(b, nil, func(b *testing.B, env benchEnv) {
		job := prepareBench(b, env)
		ctx := context.Background()
		timed(b, func(i int) {
			won, err := env.b.Claim(ctx, claimIn(job, slot(i), token(), "a"))
			if err != nil || !won {
				b.Fatalf("claim %d: won=%v err=%v", i, won, err)
			}
		})
	})
}

// BenchmarkClaimLose claims an already won slot with a new token each time: one
// publish, answered as a duplicate, no read back.
func BenchmarkClaimLose(b *testing.B) {
	benchTransports(b, nil, func(b *testing.B, env benchEnv) { benchLose(b, env) })
}

// BenchmarkClaimLoseVerified is BenchmarkClaimLose with WithVerifyEveryDuplicate:
// each duplicate is read back from the stream leader (two round trips).
func BenchmarkClaimLoseVerified(b *testing.B) {
	benchTransports(b, []Option{WithVerifyEveryDuplicate()}, func(b *testing.B, env benchEnv) { benchLose(b, env) })
}

func benchLose(b *testing.B, env benchEnv) {
	job := prepareBench(b, env)
	ctx := context.Background()
	won, err := env.b.Claim(ctx, claimIn(job, slot(0), token(), "winner"))
	require.NoError(b, err)
	require.True(b, won)
	timed(b, func(i int) {
		won, err := env.b.Claim(ctx, claimIn(job, slot(0), token(), "b"))
		if err != nil || won {
			b.Fatalf("claim %d: won=%v err=%v", i, won, err)
		}
	})
}

// BenchmarkClaimRepeatWinner repeats the winning claim: a publish answered as a
// duplicate, then a leader read of the stored claim.
func BenchmarkClaimRepeatWinner(b *testing.B) {
	benchTransports(b, nil, func(b *testing.B, env benchEnv) {
		job := prepareBench(b, env)
		ctx := context.Background()
		in := claimIn(job, slot(0), token(), "winner")
		won, err := env.b.Claim(ctx, in)
		require.NoError(b, err)
		require.True(b, won)
		timed(b, func(i int) {
			won, err := env.b.Claim(ctx, in)
			if err != nil || !won {
				b.Fatalf("claim %d: won=%v err=%v", i, won, err)
			}
		})
	})
}

// BenchmarkRawPublish is a plain synchronous js.Publish of a claim-sized message to
// a plain file-backed stream on the same server: the floor for a claim.
func BenchmarkRawPublish(b *testing.B) {
	benchTransports(b, nil, func(b *testing.B, env benchEnv) {
		ctx := context.Background()
		_, err := env.js.CreateStream(ctx, natsjs.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}})
		require.NoError(b, err)
		data := encodeClaim(claimIn("bench-raw", slot(0), token(), "a"), false, time.Now())
		timed(b, func(i int) {
			if _, err := env.js.Publish(ctx, "raw.x", data); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkRawClaimPublish publishes exactly what Claim publishes (same stream,
// per-slot subject, Nats-Msg-Id and Nats-TTL headers) with js.PublishMsg: what the
// server costs for a claim, without the backend around it.
func BenchmarkRawClaimPublish(b *testing.B) {
	benchTransports(b, nil, func(b *testing.B, env benchEnv) {
		job := prepareBench(b, env)
		st := env.b.cached(job)
		ctx := context.Background()
		timed(b, func(i int) {
			in := claimIn(job, slot(i), token(), "a")
			ms := in.Slot.UnixMilli()
			msg := &nats.Msg{Subject: st.claimSubject(ms), Header: nats.Header{}, Data: encodeClaim(in, false, time.Now())}
			msg.Header.Set(natsjs.MsgIDHeader, st.msgID(ms))
			msg.Header.Set(natsjs.MsgTTLHeader, natsutil.TTLHeader(st.ttl()))
			if _, err := env.js.PublishMsg(ctx, msg); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkHistory reads the newest 10 and 100 runs of a job holding 120 finished
// runs (a claim and a result each) over an in-process connection: a stream state
// request, batched direct gets, and the decoding of every record read.
//
//	go test -run '^$' -bench History -benchmem ./jetstream/
func BenchmarkHistory(b *testing.B) {
	js := natstest.JetStream(b, natstest.Conn(b, natstest.Server(b, embedded.Options{})))
	be := newBackend(b, js)
	ctx := context.Background()
	job := jobName("bench-history")
	require.NoError(b, be.PrepareJob(ctx, backend.JobLimits{Job: job, Retention: backend.Retention{Size: 240}}))
	const runs = 120
	for i := range runs {
		in := claimIn(job, slot(i), token(), "bench")
		in.HistorySize = 2 * runs
		won, err := be.Claim(ctx, in)
		require.NoError(b, err)
		require.True(b, won)
		now := time.Now()
		require.NoError(b, be.SaveResult(ctx, job, backend.StoredResult{
			Slot: in.Slot, Token: in.Token, Instance: in.Instance, Attempt: 1, Status: backend.StatusOK, StartedAt: now, FinishedAt: now,
		}, backend.Retention{Size: 2 * runs}))
	}
	for _, limit := range []int{10, 100} {
		b.Run(strconv.Itoa(limit), func(b *testing.B) {
			timed(b, func(int) {
				recs, err := be.History(ctx, job, limit)
				if err != nil || len(recs) != limit {
					b.Fatalf("History(%d): %d records, %v", limit, len(recs), err)
				}
			})
		})
	}
}
