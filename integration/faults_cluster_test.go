package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/embedded"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// The instances and the cluster of a fault test: connections that reconnect like a
// replica's, start and stop of every instance, stream leaders and their step-down.

// faultInstance is one scheduler instance of a fault test on its own connection,
// with a JetStream backend and a kvlease store.
type faultInstance struct {
	name  string
	nc    *nats.Conn
	sched *scheduler.Scheduler
}

// faultDial connects to url (one URL, or several separated by commas) the way a
// replica in production would: it reconnects forever, quickly.
func faultDial(t *testing.T, name, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	all := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectJitter(50*time.Millisecond, 0),
		nats.RetryOnFailedConnect(false),
	}, opts...)
	return natstest.URL(t, url, all...)
}

// newFaultInstance builds an instance on nc: job streams and the lease bucket with
// the given replicas, events into rec. callTimeout 0 keeps the scheduler's default.
func newFaultInstance(t *testing.T, nc *nats.Conn, name string, replicas int, rec *faultRecorder, callTimeout time.Duration) *faultInstance {
	t.Helper()
	j := natstest.JetStream(t, nc)
	store, err := kvlease.New(j, kvlease.WithReplicas(replicas))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	require.NoError(t, store.Init(ctxT(t, 30*time.Second)), "lease bucket for %s", name)
	b, err := jetstream.NewLeased(j, store, jetstream.WithReplicas(replicas))
	require.NoError(t, err)
	s, err := scheduler.New(scheduler.Config{Backend: b, Instance: name, OnEvent: rec.onEvent, CallTimeout: callTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return &faultInstance{name: name, nc: nc, sched: s}
}

// faultStartAll starts the instances, one after the other.
func faultStartAll(t *testing.T, ins []*faultInstance) {
	t.Helper()
	for _, in := range ins {
		require.NoError(t, in.sched.Start(ctxT(t, 30*time.Second)), "start %s", in.name)
	}
}

func faultStopAll(t *testing.T, ins []*faultInstance) time.Duration {
	t.Helper()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Go(func() { errs[i] = in.sched.Stop(ctxT(t, 20*time.Second)) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "stop %s", ins[i].name)
	}
	return time.Since(t0)
}

// faultCluster starts a 3-node cluster that the test shuts down.
func faultCluster(t *testing.T) *embedded.Cluster {
	t.Helper()
	return natstest.Cluster(t, embedded.ClusterOptions{ReadyTimeout: 45 * time.Second})
}

// faultJobStream is the stream the JetStream backend keeps job in (job names in these
// tests are lower case letters, digits and '-', which are their own token).
func faultJobStream(job string) string { return jetstream.DefaultStreamPrefix + "_" + job }

// faultBucketStream is the stream of the default lease bucket.
const faultBucketStream = "KV_" + kvlease.DefaultBucket

// faultLeaders returns the node leading each stream, -1 for none.
func faultLeaders(c *embedded.Cluster, streams []string) map[string]int {
	out := map[string]int{}
	for _, st := range streams {
		i, err := c.StreamLeader("", st)
		if err != nil {
			i = -1
		}
		out[st] = i
	}
	return out
}

// faultWaitLeaders waits until every stream has a leader on a running node that is
// not in avoid (a stepped-down or stopped node), and returns the leaders.
func faultWaitLeaders(t *testing.T, c *embedded.Cluster, streams []string, avoid map[string]int, within time.Duration) (map[string]int, error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := faultLeaders(c, streams)
		ok := true
		for _, st := range streams {
			if a, avoided := avoid[st]; l[st] < 0 || (avoided && l[st] == a) {
				ok = false
			}
		}
		if ok {
			return l, nil
		}
		if time.Now().After(deadline) {
			return l, fmt.Errorf("streams without a new leader after %v: %v (avoiding %v)", within, l, avoid)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-t.Context().Done():
			return l, t.Context().Err()
		}
	}
}

// faultStepDown asks the leader of stream to step down, through the JetStream API.
func faultStepDown(nc *nats.Conn, stream string) error {
	m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second)
	if err != nil {
		return fmt.Errorf("step down %s: %w", stream, err)
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("step down %s: %w: %s", stream, err, m.Data)
	}
	if !resp.Success {
		if resp.Error != nil {
			return fmt.Errorf("step down %s: %d %s", stream, resp.Error.ErrCode, resp.Error.Description)
		}
		return fmt.Errorf("step down %s: %s", stream, m.Data)
	}
	return nil
}
