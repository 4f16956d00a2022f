package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/internal/natstest"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
	"github.com/anarchon/anarchon/scheduler"
)

// rolePermissions is role's permissions as fleet.Permissions gives them (the
// replica's with the JetStream backend and the kvlease store), as nats-server
// takes them.
func rolePermissions(t testing.TB, role fleet.Role) *server.Permissions {
	t.Helper()
	p, err := fleet.Permissions(role, fleet.PermissionsConfig{Backend: replicaBackend(t)[role]})
	require.NoError(t, err)
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.Publish},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
	}
	if p.Responses != nil {
		sp.Response = &server.ResponsePermission{MaxMsgs: p.Responses.Max, Expires: p.Responses.TTL}
	}
	return sp
}

// replicaBackend is what the replica's backend (jetstream with kvlease) publishes.
func replicaBackend(t testing.TB) map[fleet.Role][]string {
	t.Helper()
	js, err := jetstream.Permissions()
	require.NoError(t, err)
	kv, err := kvlease.Permissions()
	require.NoError(t, err)
	return map[fleet.Role][]string{fleet.RoleReplica: append(js, kv...)}
}

// startAuthServer starts a nats-server with a user per role (the user name is the
// role, so is the password) with the permissions fleet.Permissions gives, and an
// admin who may do anything (the account's owner, who may create consumers).
// embedded.Options has no users or accounts, so this test starts nats-server
// itself; it fails, never skips, when it cannot.
func startAuthServer(t testing.TB, listen bool) *server.Server {
	t.Helper()
	users := []*server.User{{Username: "admin", Password: "admin"}}
	for _, role := range fleet.Roles {
		users = append(users, &server.User{Username: string(role), Password: string(role), Permissions: rolePermissions(t, role)})
	}
	opts := &server.Options{
		ServerName: "fleet-auth", Host: "127.0.0.1", Port: -1, DontListen: !listen, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Users: users,
	}
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "the nats-server with users must start")
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// violations collects the permissions violations the server reports to one
// connection.
type violations struct {
	mu   sync.Mutex
	errs []string
	ch   chan string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
	select {
	case v.ch <- err.Error():
	default:
	}
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// refused waits for the server to report that what was just tried on subject
// (publish or subscribe) is not allowed.
func (v *violations) refused(t testing.TB, kind, subject string) {
	t.Helper()
	want := "Permissions Violation for " + kind + " to \"" + subject + "\""
	if strings.HasSuffix(kind, " of") { // "Publish with Reply of"
		want = "Permissions Violation for " + kind + " \"" + subject + "\""
	}
	deadline := time.After(5 * time.Second)
	for {
		for _, e := range v.all() {
			if strings.Contains(e, want) {
				return
			}
		}
		select {
		case <-v.ch:
		case <-deadline:
			t.Fatalf("no %q reported; reported: %v", want, v.all())
		}
	}
}

// dialAs connects as a role's user, with the role's inbox prefix.
func dialAs(s *server.Server, role fleet.Role, v *violations) func(...nats.Option) (*nats.Conn, error) {
	return func(opts ...nats.Option) (*nats.Conn, error) {
		base := []nats.Option{nats.InProcessServer(s), nats.UserInfo(string(role), string(role)),
			nats.CustomInboxPrefix(fleet.InboxPrefix(role))}
		if v != nil {
			base = append(base, nats.ErrorHandler(v.handler))
		}
		return nats.Connect("", append(base, opts...)...)
	}
}

func newViolations() *violations { return &violations{ch: make(chan string, 64)} }

// roleFleet is one replica serving under the replica role, with the JetStream
// backend and the kvlease store on its connection, and a client per role.
type roleFleet struct {
	*testFleet
	server   *server.Server
	replica  *violations // what the replica's connections were refused
	conns    map[fleet.Role]*nats.Conn
	seen     map[fleet.Role]*violations
	clients  map[fleet.Role]*fleet.Client
	admin    *nats.Conn
	logs     *logCount
	failNext func()
}

func startRoleFleet(t *testing.T) *roleFleet {
	t.Helper()
	s := startAuthServer(t, false)
	rf := &roleFleet{server: s, replica: newViolations(), conns: map[fleet.Role]*nats.Conn{}, seen: map[fleet.Role]*violations{},
		clients: map[fleet.Role]*fleet.Client{}, logs: newLogCount()}
	var mu sync.Mutex
	fail := false
	rf.failNext = func() { mu.Lock(); fail = true; mu.Unlock() }
	later := time.Now().Add(time.Hour)
	rf.testFleet = startFleet(t, fleetSetup{
		instances: []string{"A"}, dial: dialAs(s, fleet.RoleReplica, rf.replica), backendFor: leasedBackend, events: true,
		serve: []fleet.Option{fleet.WithLogger(slog.New(rf.logs))},
		// report, with no slot during the test (a test asserts it has no runs),
		// and a job whose slots run (leases, records) meanwhile.
		jobs: func(string) []testJob {
			report := every(jobReport, time.Hour)
			report.Opts = []scheduler.JobOption{scheduler.WithStartAt(later)}
			return []testJob{report, every("tick", 300*time.Millisecond)}
		},
		handler: func(context.Context, scheduler.Run) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				fail = false
				return errors.New("disk full")
			}
			return nil
		},
	})
	for _, role := range fleet.Roles {
		rf.seen[role] = newViolations()
		rf.conns[role] = natstest.Dial(t, dialAs(s, role, rf.seen[role]))
		c, err := fleet.NewClient(rf.conns[role])
		require.NoError(t, err)
		rf.clients[role] = c
	}
	rf.client = rf.clients[fleet.RoleOperator] // the fleet's helpers ask as an operator
	rf.admin = natstest.Dial(t, func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect("", append([]nats.Option{nats.InProcessServer(s), nats.UserInfo("admin", "admin")}, opts...)...)
	})
	return rf
}

// short is a context for a request that a refusal leaves unanswered.
func short(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// TestRolesOnARealServer tries, as each role, every subject class anarchon uses:
// the control and read subjects, events, consumers and watches on the registry,
// the lease bucket and a job stream, direct gets, another role's inboxes and the
// shared _INBOX, micro's $SRV; and checks what the server refuses and what works.
// The replica serves all along under its own role, with the JetStream backend and
// kvlease store, and is refused nothing.
func TestRolesOnARealServer(t *testing.T) {
	rf := startRoleFleet(t)
	ctx := requestCtx(t)
	job := jobReport
	stream := "ANARCHON_" + job // the job's stream on the JetStream backend

	for _, role := range fleet.Roles {
		t.Run(string(role), func(t *testing.T) {
			nc, v, c := rf.conns[role], rf.seen[role], rf.clients[role]
			reader := role == fleet.RoleViewer || role == fleet.RoleOperator
			// Reads.
			fl, err := c.Jobs(ctx)
			if reader {
				require.NoError(t, err)
				assert.Len(t, fl.Replicas, 1)
				assert.Len(t, fl.Registered, 1, "the registry, read with direct gets")
				assert.Empty(t, fl.Warnings)
				_, err = c.History(ctx, job, 5)
				require.NoError(t, err)
				_, err = c.Active(ctx, job)
				require.NoError(t, err)
				_, err = c.Why(ctx, job, fleet.WhyRequest{Slot: time.Now().Truncate(time.Hour)})
				require.NoError(t, err)
			} else {
				v.refused(t, "Publish", "anarchon.JOBS")
				_, err = c.History(short(t), job, 5)
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.HISTORY."+fleet.JobToken(job))
			}
			// micro answers $SRV requests on any reply subject: nobody but an admin
			// may send one.
			for _, subject := range []string{"$SRV.PING", "$SRV.PING." + fleet.ServiceName, "$SRV.INFO." + fleet.ServiceName} {
				require.NoError(t, nc.Publish(subject, nil))
				v.refused(t, "Publish", subject)
			}

			// Changes.
			_, err = c.Pause(short(t), job, fleet.PauseRequest{Reason: string(role) + " tries"})
			_, err2 := c.PauseAll(short(t), fleet.PauseRequest{Reason: string(role) + " tries"})
			if role == fleet.RoleOperator {
				require.NoError(t, err)
				require.NoError(t, err2)
				_, err = c.Resume(ctx, job, fleet.ResumeRequest{})
				require.NoError(t, err)
				_, err = c.ResumeAll(ctx, fleet.ResumeRequest{})
				require.NoError(t, err)
				r, err := c.Trigger(ctx, job, fleet.TriggerRequest{Wait: true})
				require.NoError(t, err)
				assert.Equal(t, scheduler.StatusOK, r.Run.Status)
				now := time.Now()
				bf, err := c.Backfill(ctx, job, fleet.BackfillRequest{From: now.Add(-time.Minute), To: now.Add(-time.Second), By: "ana", Wait: true})
				require.NoError(t, err)
				assert.Equal(t, fleet.StateFinished, bf.State)
				assert.Equal(t, "ana", bf.By)
			} else {
				v.refused(t, "Publish", "anarchon.PAUSE."+fleet.JobToken(job))
				v.refused(t, "Publish", "anarchon.PAUSEALL")
				_, err = c.Trigger(short(t), job, fleet.TriggerRequest{})
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.TRIGGER."+fleet.JobToken(job))
				_, err = c.Backfill(short(t), job, fleet.BackfillRequest{From: time.Now().Add(-time.Minute), To: time.Now()})
				require.Error(t, err)
				v.refused(t, "Publish", "anarchon.BACKFILL."+fleet.JobToken(job))
			}

			// Events.
			sub, err := nc.SubscribeSync("anarchon.EVENTS.*")
			require.NoError(t, err)
			if !reader {
				v.refused(t, "Subscription", "anarchon.EVENTS.*")
			}
			_ = sub.Unsubscribe()

			// Stream updates: a replica's backend follows those of its job streams.
			upd, err := nc.SubscribeSync(jetstream.StreamUpdatedSubject)
			require.NoError(t, err)
			if role == fleet.RoleReplica {
				require.NoError(t, nc.Flush())
				js := natstest.JetStream(t, nc)
				st, err := js.Stream(ctx, stream)
				require.NoError(t, err)
				cfg := st.CachedInfo().Config
				cfg.Description = "seen by the replica"
				_, err = js.UpdateStream(ctx, cfg)
				require.NoError(t, err)
				m, err := upd.NextMsg(5 * time.Second)
				require.NoError(t, err, "the replica hears of a stream update")
				assert.Equal(t, "$JS.EVENT.ADVISORY.STREAM.UPDATED."+stream, m.Subject)
			} else {
				v.refused(t, "Subscription", jetstream.StreamUpdatedSubject)
			}
			_ = upd.Unsubscribe()

			// Consumers: on the registry, the lease bucket and a job stream, and a
			// key-value watch of the lease bucket. The replica may create the
			// consumers its registry and leases need; nobody else any.
			for _, s := range []string{"KV_" + fleet.DefaultRegistryBucket, "KV_" + kvlease.DefaultBucket, stream} {
				subject := "$JS.API.CONSUMER.CREATE." + s + ".probe-" + string(role)
				body, err := json.Marshal(map[string]any{"stream_name": s, "config": map[string]any{"name": "probe-" + string(role),
					"deliver_subject": "anarchon.TRIGGER." + fleet.JobToken(job), "ack_policy": "none"}})
				require.NoError(t, err)
				_, err = nc.Request(subject, body, 150*time.Millisecond)
				if role == fleet.RoleReplica && s != stream {
					require.NoError(t, err, "the replica creates consumers on %s", s)
					continue
				}
				require.Error(t, err)
				v.refused(t, "Publish", subject)
			}
			js := natstest.JetStream(t, nc)
			leases, err := js.KeyValue(short(t), kvlease.DefaultBucket)
			if role == fleet.RoleReplica {
				require.NoError(t, err)
				w, err := leases.WatchAll(ctx)
				require.NoError(t, err)
				require.NoError(t, w.Stop())
			} else {
				require.Error(t, err)
				v.refused(t, "Publish", "$JS.API.STREAM.INFO.KV_"+kvlease.DefaultBucket)
			}
			// Direct gets: of the registry for everyone, of the leases for replicas.
			m, err := nc.Request("$JS.API.DIRECT.GET.KV_"+fleet.DefaultRegistryBucket, []byte(`{"multi_last":["$KV.>"]}`), 5*time.Second)
			require.NoError(t, err)
			assert.NotEqual(t, "503", m.Header.Get("Status"))
			_, err = nc.Request("$JS.API.DIRECT.GET.KV_"+kvlease.DefaultBucket, []byte(`{"multi_last":["$KV.>"]}`), 150*time.Millisecond)
			if role == fleet.RoleReplica {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				v.refused(t, "Publish", "$JS.API.DIRECT.GET.KV_"+kvlease.DefaultBucket)
			}

			// The registry is written by replicas alone.
			entry := "$KV." + fleet.DefaultRegistryBucket + "." + fleet.JobToken(fleet.DefaultPrefix) + ".forged"
			if role != fleet.RoleReplica {
				require.NoError(t, nc.Publish(entry, []byte(`{"format":1,"instance":"forged","jobs":[]}`)))
				v.refused(t, "Publish", entry)
			}

			// Inboxes: only the role's own.
			for _, other := range fleet.Roles {
				if other == role {
					continue
				}
				inbox := fleet.InboxPrefix(other) + ".x"
				sub, err := nc.SubscribeSync(fleet.InboxPrefix(other) + ".>")
				require.NoError(t, err)
				v.refused(t, "Subscription", fleet.InboxPrefix(other)+".>")
				_ = sub.Unsubscribe()
				require.NoError(t, nc.Publish(inbox, []byte(`{"state":"finished"}`)))
				v.refused(t, "Publish", inbox)
			}
			sub, err = nc.SubscribeSync("_INBOX.>")
			require.NoError(t, err)
			v.refused(t, "Subscription", "_INBOX.>")
			_ = sub.Unsubscribe()
		})
	}
	rf.waitHistory(t, "tick", "a scheduled run with a lease", func(r fleet.Run) bool {
		return !r.Manual && r.Status == scheduler.StatusOK
	})
	assert.Empty(t, rf.replica.all(), "the replica, serving under its role, is refused nothing")
}

// TestViewerCannotTriggerThroughAPushConsumer: the viewer may not create a
// consumer at all, so it cannot have the server deliver the registry's messages
// (a stopped replica's empty purge marker among them) to a control subject; and
// when a user who may (the account's admin) does, the replica drops what JetStream
// delivers: nothing runs, the all-jobs pause stays.
func TestViewerCannotTriggerThroughAPushConsumer(t *testing.T) {
	rf := startRoleFleet(t)
	ctx := requestCtx(t)
	_, err := rf.clients[fleet.RoleOperator].PauseAll(ctx, fleet.PauseRequest{Reason: "freeze", By: "ops"})
	require.NoError(t, err)
	// A replica that stopped: its purge marker is in the registry.
	gone := startFleet(t, fleetSetup{instances: []string{"gone"}, dial: dialAs(rf.server, fleet.RoleReplica, nil)})
	require.NoError(t, gone.replicas[0].svc.Stop(ctx))

	registry := "KV_" + fleet.DefaultRegistryBucket
	consumer := func(nc *nats.Conn, deliver string) (string, error) {
		body, err := json.Marshal(map[string]any{"stream_name": registry, "config": map[string]any{
			"deliver_subject": deliver, "deliver_group": micro.DefaultQueueGroup, "deliver_policy": "all", "ack_policy": "none"}})
		require.NoError(t, err)
		m, err := nc.Request("$JS.API.CONSUMER.CREATE."+registry, body, 150*time.Millisecond)
		if err != nil {
			return "", err
		}
		var r struct {
			Name string `json:"name"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &r))
		return r.Name, nil
	}
	trigger, resumeAll := rf.client.Subject("trigger", jobReport), "anarchon.RESUMEALL"
	for _, deliver := range []string{trigger, resumeAll} {
		_, err := consumer(rf.conns[fleet.RoleViewer], deliver)
		require.Error(t, err)
		rf.seen[fleet.RoleViewer].refused(t, "Publish", "$JS.API.CONSUMER.CREATE."+registry)
	}

	delivered := 0
	for _, deliver := range []string{trigger, resumeAll} {
		name, err := consumer(rf.admin, deliver)
		require.NoError(t, err, "the admin may create consumers")
		require.Eventually(t, func() bool {
			m, err := rf.admin.Request("$JS.API.CONSUMER.INFO."+registry+"."+name, nil, 5*time.Second)
			require.NoError(t, err)
			var i natsjs.ConsumerInfo
			require.NoError(t, json.Unmarshal(m.Data, &i))
			if i.NumPending > 0 || i.Delivered.Consumer == 0 {
				return false
			}
			delivered += int(i.Delivered.Consumer)
			return true
		}, 10*time.Second, 10*time.Millisecond)
	}
	rf.logs.wait(t, delivered, logIgnored)
	assert.Zero(t, rf.manualRuns(), "nothing ran")
	p, ok := rf.replicas[0].s.Paused(jobReport)
	require.True(t, ok, "the all-jobs pause stays")
	assert.Equal(t, "freeze", p.Reason)
}

// TestViewerCannotWriteThroughAReplySubject: a replica answers with
// allow_responses, which lets it publish on whatever reply subject a request
// names; the viewer names another application's stream, the registry's keys, the
// lease bucket's, a job stream's claim subject and the JetStream API. The replica
// answers none of them: nothing is written, the registry reads as before.
func TestViewerCannotWriteThroughAReplySubject(t *testing.T) {
	rf := startRoleFleet(t)
	ctx := requestCtx(t)
	js := natstest.JetStream(t, rf.admin)
	victim, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "VICTIM", Subjects: []string{"victim.>"}, Storage: natsjs.MemoryStorage})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "victim.x", []byte("keep me"))
	require.NoError(t, err)
	leases, err := js.Stream(ctx, "KV_"+kvlease.DefaultBucket)
	require.NoError(t, err)
	before, err := leases.Info(ctx)
	require.NoError(t, err)

	viewer := rf.conns[fleet.RoleViewer]
	replies := []string{
		"victim.y",
		"$KV." + fleet.DefaultRegistryBucket + "." + fleet.JobToken(fleet.DefaultPrefix) + ".forged",
		"$KV." + kvlease.DefaultBucket + ".pause." + fleet.JobToken(jobReport),
		"anarchon." + jobReport + ".claim.1000",
		"$JS.API.STREAM.DELETE.VICTIM",
		"$JS.API.STREAM.PURGE.VICTIM",
	}
	sent := 0
	for _, reply := range replies {
		for _, subject := range []string{"anarchon.JOBS", "anarchon.HISTORY." + fleet.JobToken(jobReport), "anarchon.ACTIVE." + fleet.JobToken(jobReport)} {
			require.NoError(t, viewer.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte(`{"v":1}`)}))
			// nats-server refuses a request whose reply subject is the JetStream
			// API (a reserved reply: "Permissions Violation for Publish with Reply
			// of"); the others reach the replica.
			if !strings.HasPrefix(reply, "$JS.API.") {
				sent++
			}
		}
	}
	rf.logs.wait(t, sent, "fleet ignored a request")
	rf.seen[fleet.RoleViewer].refused(t, "Publish with Reply of", "$JS.API.STREAM.DELETE.VICTIM")
	for _, e := range rf.seen[fleet.RoleViewer].all() {
		assert.Contains(t, e, `Publish with Reply of "$JS.API.`, "the viewer may send every other of these requests")
	}
	assert.Empty(t, rf.replica.all())

	info, err := victim.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Msgs, "nothing written into another application's stream, none purged")
	after, err := leases.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, before.State.LastSeq, after.State.LastSeq, "nothing written into the lease bucket")
	for seq := before.State.LastSeq + 1; seq <= after.State.LastSeq; seq++ { // what was, if any
		if m, err := leases.GetMsg(ctx, seq); err == nil {
			t.Logf("written into the lease bucket: %s %v %q", m.Subject, m.Header, m.Data)
		}
	}
	regs, bad, err := rf.clients[fleet.RoleViewer].Registry(ctx)
	require.NoError(t, err)
	assert.Empty(t, bad, "no entry forged in the registry")
	assert.Len(t, regs, 1)
	h, err := rf.clients[fleet.RoleViewer].History(ctx, jobReport, 10)
	require.NoError(t, err)
	assert.Empty(t, h.Runs, "no claim forged")
}

// TestViewerCannotForgeOperatorReplies: the viewer can neither read the replies
// an operator gets (its inboxes, or the shared _INBOX) nor publish on them, so the
// operator's trigger --wait hears how the run really ended: from the replica,
// which answers on the reply subject (allow_responses), publishing on no inbox.
func TestViewerCannotForgeOperatorReplies(t *testing.T) {
	rf := startRoleFleet(t)
	viewer, v := rf.conns[fleet.RoleViewer], rf.seen[fleet.RoleViewer]
	for _, pattern := range []string{"_INBOX.>", fleet.InboxPrefix(fleet.RoleOperator) + ".>", ">"} {
		sub, err := viewer.SubscribeSync(pattern)
		require.NoError(t, err)
		v.refused(t, "Subscription", pattern)
		_ = sub.Unsubscribe()
	}
	forged := fleet.InboxPrefix(fleet.RoleOperator) + ".guess.1"
	require.NoError(t, viewer.Publish(forged, []byte(`{"state":"finished","run":{"status":"ok"}}`)))
	v.refused(t, "Publish", forged)

	rf.failNext()
	r, err := rf.clients[fleet.RoleOperator].Trigger(requestCtx(t), jobReport, fleet.TriggerRequest{By: "ana", Wait: true})
	require.NoError(t, err)
	require.NotNil(t, r.Run)
	assert.Equal(t, scheduler.StatusError, r.Run.Status, "the replica's own answer")
	assert.Equal(t, "disk full", r.Run.Error)
	assert.Empty(t, rf.replica.all())
}
