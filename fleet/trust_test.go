package fleet_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/scheduler"
)

// logCount counts a replica's log records by message.
type logCount struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{}
}

func newLogCount() *logCount { return &logCount{n: map[string]int{}, changed: make(chan struct{}, 1)} }

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCount) WithGroup(string) slog.Handler            { return l }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.n[r.Message]++
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return nil
}

// wait waits until the records with these messages add up to n.
func (l *logCount) wait(t testing.TB, n int, msgs ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		got := 0
		for _, m := range msgs {
			got += l.n[m]
		}
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("%d of %d log records %q within 10s", got, n, msgs)
		}
	}
}

const (
	logIgnored = "fleet ignored a message JetStream sent"
	logRefused = "fleet request refused"
)

// TestReplicasIgnoreWhatJetStreamDelivers: on an account where anyone may create
// consumers and send direct gets, JetStream is made to send stored messages to the
// control subjects: push consumers (AckNone, AckExplicit, headers only) on the
// registry's bucket (entries and the empty purge markers replicas leave) and on a
// stream of valid-looking requests, a stream that republishes into them, and direct
// and leader gets whose reply subject is a control subject. Nothing runs and the
// operator's all-jobs pause stays; every such message is dropped (or refused) and
// logged.
func TestReplicasIgnoreWhatJetStreamDelivers(t *testing.T) {
	logs := newLogCount()
	f := startFleet(t, fleetSetup{instances: []string{"A"}, serve: []fleet.Option{fleet.WithLogger(slog.New(logs))}})
	ctx := requestCtx(t)
	_, err := f.client.PauseAll(ctx, fleet.PauseRequest{Reason: "freeze", By: "ops"})
	require.NoError(t, err)
	// A replica that stopped left a purge marker (an empty body) in the registry.
	gone := startFleet(t, fleetSetup{instances: []string{"gone"}, dial: f.dial})
	require.NoError(t, gone.replicas[0].svc.Stop(ctx))

	js := natstest.JetStream(t, f.nc)
	// A stream of messages that are valid requests in every other way.
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "JUNK", Subjects: []string{"junk.>"}, Storage: natsjs.MemoryStorage,
		AllowDirect: true})
	require.NoError(t, err)
	for _, body := range []string{`{"v":1}`, `{"v":1,"by":"eve","wait":true}`, ``} {
		_, err := js.Publish(ctx, "junk.req", []byte(body))
		require.NoError(t, err)
	}

	trigger, resumeAll := f.client.Subject("trigger", jobReport), "anarchon.RESUMEALL"
	type consumer struct{ stream, name string }
	var consumers []consumer
	for _, stream := range []string{"KV_" + fleet.DefaultRegistryBucket, "JUNK"} {
		for _, deliver := range []string{trigger, resumeAll} {
			for _, cfg := range []map[string]any{{"ack_policy": "none"}, {"ack_policy": "explicit"}, {"ack_policy": "none", "headers_only": true}} {
				// micro's queue group: a push consumer delivers to a queue
				// subscription only through a deliver group of the same name.
				cfg["deliver_subject"], cfg["deliver_policy"], cfg["deliver_group"] = deliver, "all", micro.DefaultQueueGroup
				body, err := json.Marshal(map[string]any{"stream_name": stream, "config": cfg})
				require.NoError(t, err)
				r, err := f.nc.Request("$JS.API.CONSUMER.CREATE."+stream, body, 5*time.Second)
				require.NoError(t, err)
				var created struct {
					Name  string          `json:"name"`
					Error json.RawMessage `json:"error"`
				}
				require.NoError(t, json.Unmarshal(r.Data, &created))
				require.Nil(t, created.Error, "the consumer is created: %s", r.Data)
				consumers = append(consumers, consumer{stream, created.Name})
			}
		}
	}
	_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "REPUBLISH", Subjects: []string{"again.>"}, Storage: natsjs.MemoryStorage,
		RePublish: &natsjs.RePublish{Source: "again.req", Destination: trigger}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "again.req", []byte(`{"v":1,"by":"eve"}`))
	require.NoError(t, err)
	sent := 1 // the republished copy
	for _, get := range []struct {
		subject, body string
		answers       int
	}{
		{"$JS.API.DIRECT.GET.JUNK", `{"last_by_subj":"junk.req"}`, 1},
		{"$JS.API.DIRECT.GET.JUNK", `{"seq":1,"batch":3}`, 4},       // three messages and the end of the batch
		{"$JS.API.DIRECT.GET.JUNK", `{"multi_last":["junk.>"]}`, 2}, // one and the end
		{"$JS.API.STREAM.MSG.GET.JUNK", `{"seq":1}`, 1},             // JSON: refused as a request
	} {
		require.NoError(t, f.nc.PublishMsg(&nats.Msg{Subject: get.subject, Reply: trigger, Data: []byte(get.body)}))
		require.NoError(t, f.nc.PublishMsg(&nats.Msg{Subject: get.subject, Reply: resumeAll, Data: []byte(get.body)}))
		sent += 2 * get.answers
	}
	require.NoError(t, f.nc.PublishMsg(&nats.Msg{Subject: "$SRV.PING", Reply: trigger})) // the replica answers on trigger: refused
	sent++

	// Every consumer has delivered everything it had when it was created.
	for _, c := range consumers {
		require.Eventually(t, func() bool {
			r, err := f.nc.Request("$JS.API.CONSUMER.INFO."+c.stream+"."+c.name, nil, 5*time.Second)
			require.NoError(t, err)
			var i natsjs.ConsumerInfo
			require.NoError(t, json.Unmarshal(r.Data, &i))
			if i.NumPending > 0 || i.Delivered.Consumer == 0 {
				return false
			}
			sent += int(i.Delivered.Consumer)
			return true
		}, 10*time.Second, 10*time.Millisecond)
	}
	t.Logf("%d messages sent to %s and %s by JetStream or on its behalf", sent, trigger, resumeAll)
	require.Greater(t, sent, 30)
	logs.wait(t, sent, logIgnored, logRefused)
	logs.mu.Lock()
	t.Logf("dropped as sent by JetStream: %d; refused as requests: %d", logs.n[logIgnored], logs.n[logRefused])
	assert.LessOrEqual(t, logs.n[logRefused], 3, "only the leader get's JSON answers and the ping answer reach the decoder")
	logs.mu.Unlock()

	assert.Zero(t, f.manualRuns(), "nothing ran")
	p, ok := f.replicas[0].s.Paused(jobReport)
	require.True(t, ok, "the all-jobs pause stays")
	assert.Equal(t, "freeze", p.Reason)
	pauses, err := f.backend.Pauses(ctx)
	require.NoError(t, err)
	require.Len(t, pauses, 1)
	assert.Empty(t, pauses[0].Job)

	// What the operator asks still works.
	_, err = f.client.ResumeAll(ctx, fleet.ResumeRequest{By: "ops"})
	require.NoError(t, err)
	r, err := f.client.Trigger(ctx, jobReport, fleet.TriggerRequest{By: "ops", Wait: true})
	require.NoError(t, err)
	assert.Equal(t, scheduler.StatusOK, r.Run.Status)
	assert.Equal(t, 1, f.manualRuns())
	assert.True(t, strings.HasPrefix(trigger, "anarchon.TRIGGER."))
}

// TestNoReplyIsARequest: no reply, error reply, event or registry entry has a
// top-level "v", so none of them is a request, wherever a requester or JetStream
// has it sent.
func TestNoReplyIsARequest(t *testing.T) {
	run := &fleet.Run{Job: "j", Status: scheduler.StatusOK}
	for _, v := range []any{
		fleet.Replica{Jobs: []fleet.JobState{{Name: "j", LastRun: run}}, Part: 1, Parts: 1},
		fleet.HistoryReply{Runs: []fleet.Run{*run}, Part: 1, Parts: 1},
		fleet.ActiveReply{Runs: []fleet.ActiveRun{{Job: "j"}}, Part: 1, Parts: 1},
		fleet.TriggerReply{State: fleet.StateFinished, Run: run},
		fleet.PauseReply{Pause: fleet.PauseInfo{Job: "j", Reason: "r"}},
		fleet.ResumeReply{StillPaused: &fleet.PauseInfo{}},
		fleet.ErrorBody{Code: 400, Error: "bad request"},
		fleet.Event{Kind: scheduler.EventFinished},
		fleet.Registration{Format: 1},
	} {
		data, err := json.Marshal(v)
		require.NoError(t, err)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(data, &top))
		assert.NotContains(t, top, "v", "%T", v)
	}
}
