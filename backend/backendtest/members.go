package backendtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/backend"
)

// memberWait bounds how long a case waits for a watch to show a change: a
// store that expires members by its server's clock may take a while.
const memberWait = 15 * time.Second

// RunMembers runs the membership section of the conformance suite on a backend
// that implements backend.Membership: beats seen by the watch of another
// backend value, group changes, Leave, expiry after the ttl, members kept alive
// by their beats, many members at once, names that are paths or subject
// wildcards, invalid members refused, and the watch's end with its context.
// Like Run, every backend newBackend returns within one test shares one store.
// The cases keep to instance names of their own; all but Expiry run in
// parallel. No other test may change the store's members during Expiry.
func RunMembers(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, f *memberFixture)
	}{
		{"Beat", testMemberBeat},
		{"Leave", testMemberLeave},
		{"KeptAlive", testMemberKeptAlive},
		{"Many", testMemberMany},
		{"Names", testMemberNames},
		{"Invalid", testMemberInvalid},
		{"WatchEnds", testMemberWatchEnds},
	}
	fixture := func(t *testing.T, name string) *memberFixture {
		a, b := setup(t, newBackend), setup(t, newBackend)
		ma, ok := a.(backend.Membership)
		require.True(t, ok, "%T is not a backend.Membership", a)
		return &memberFixture{t: t, a: ma, b: b.(backend.Membership), ctx: Context(t),
			prefix: JobName("member ✓ "+name) + " "}
	}
	t.Run("Members", func(t *testing.T) {
		t.Run("Cases", func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, fixture(t, c.name))
				})
			}
		})
		// After the others, alone: no other change may wake the watch when
		// the member expires.
		t.Run("Expiry", func(t *testing.T) { testMemberExpiry(t, fixture(t, "Expiry")) })
	})
}

// memberFixture is one case's two backend values on one store, and the prefix
// of its instance names.
type memberFixture struct {
	t      *testing.T
	a, b   backend.Membership
	ctx    context.Context
	prefix string
}

func (f *memberFixture) beat(s backend.Membership, m backend.Member, ttl time.Duration) {
	f.t.Helper()
	require.NoError(f.t, s.Beat(f.ctx, m, ttl), "Beat %q", m.Instance)
}

// leaveAfter leaves instances when the case ends, so that other cases'
// stores and watches are not left with them.
func (f *memberFixture) leaveAfter(instances ...string) {
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, inst := range instances {
			assert.NoError(f.t, f.a.Leave(ctx, inst), "Leave %q", inst)
		}
	})
}

// memberWatch is a running WatchMembers of one backend value: every set it
// delivered, cut down to the case's instances.
type memberWatch struct {
	mu    sync.Mutex
	sets  [][]backend.Member
	ended bool
	err   error
}

// watch starts s.WatchMembers, stopped when the case ends; the watch must
// then return nil.
func (f *memberFixture) watch(s backend.Membership) *memberWatch {
	t := f.t
	ctx, cancel := context.WithCancel(f.ctx)
	w := &memberWatch{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.WatchMembers(ctx, func(all []backend.Member) {
			if !slices.IsSortedFunc(all, func(x, y backend.Member) int { return strings.Compare(x.Instance, y.Instance) }) {
				t.Errorf("a watch delivered members out of order")
			}
			mine := f.mine(all)
			w.mu.Lock()
			w.sets = append(w.sets, mine)
			w.mu.Unlock()
		})
		w.mu.Lock()
		w.ended, w.err = true, err
		w.mu.Unlock()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
			w.mu.Lock()
			defer w.mu.Unlock()
			assert.NoError(t, w.err, "WatchMembers returns nil when its context ends")
		case <-time.After(10 * time.Second):
			t.Errorf("WatchMembers did not return within 10s of its context's end")
		}
	})
	w.await(t, "the watch's first set", func(int, []backend.Member) bool { return true })
	return w
}

// mine returns the members of all that are this case's, in their order.
func (f *memberFixture) mine(all []backend.Member) []backend.Member {
	out := []backend.Member{}
	for _, m := range all {
		if strings.HasPrefix(m.Instance, f.prefix) {
			out = append(out, m)
		}
	}
	return out
}

// await waits until ok accepts the last set the watch delivered (and how
// many it delivered), and returns that set.
func (w *memberWatch) await(t *testing.T, what string, ok func(n int, last []backend.Member) bool) []backend.Member {
	t.Helper()
	var got []backend.Member
	var ended bool
	var err error
	cond := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		ended, err = w.ended, w.err
		if len(w.sets) == 0 {
			return ended
		}
		got = w.sets[len(w.sets)-1]
		return ended || ok(len(w.sets), got)
	}
	if !assert.Eventually(t, cond, memberWait, 10*time.Millisecond, "waiting for %s", what) {
		require.FailNow(t, "the watch never showed it", "%s; last set %v", what, got)
	}
	require.False(t, ended, "the watch ended while waiting for %s: %v", what, err)
	return got
}

// all returns every set the watch delivered so far.
func (w *memberWatch) all() [][]backend.Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sets)
}

// has reports whether set holds m (instance and group).
func has(set []backend.Member, m backend.Member) bool { return slices.Contains(set, m) }

// hasInstance reports whether set holds instance, of any group.
func hasInstance(set []backend.Member, instance string) bool {
	return slices.ContainsFunc(set, func(m backend.Member) bool { return m.Instance == instance })
}

// A beat through one backend value is seen by the watch of another, and by a
// watch started later in its first set; a beat with another group is seen.
func testMemberBeat(t *testing.T, f *memberFixture) {
	w := f.watch(f.b)
	require.Empty(t, w.all()[0], "nothing of the case's is stored before its first beat")

	one := backend.Member{Instance: f.prefix + "one", Group: "g1"}
	f.leaveAfter(one.Instance)
	f.beat(f.a, one, time.Minute)
	w.await(t, "the beat", func(_ int, s []backend.Member) bool { return slices.Equal(s, []backend.Member{one}) })

	later := f.watch(f.a)
	assert.Equal(t, []backend.Member{one}, later.all()[0], "a watch started later sees the member in its first set")

	one.Group = "g2"
	f.beat(f.a, one, time.Minute)
	w.await(t, "the group change", func(_ int, s []backend.Member) bool { return slices.Equal(s, []backend.Member{one}) })
	later.await(t, "the group change, on the later watch", func(_ int, s []backend.Member) bool { return slices.Equal(s, []backend.Member{one}) })

	two := backend.Member{Instance: f.prefix + "two", Group: ""}
	f.leaveAfter(two.Instance)
	f.beat(f.b, two, time.Minute)
	w.await(t, "a second member", func(_ int, s []backend.Member) bool { return slices.Equal(s, []backend.Member{one, two}) })
}

// Leave removes a member at once, long before its ttl; leaving again, or
// leaving an instance never stored, is not an error.
func testMemberLeave(t *testing.T, f *memberFixture) {
	w := f.watch(f.b)
	stay := backend.Member{Instance: f.prefix + "stay", Group: "g"}
	gone := backend.Member{Instance: f.prefix + "gone", Group: "g"}
	f.leaveAfter(stay.Instance)
	f.beat(f.a, stay, backend.MaxMemberTTL)
	f.beat(f.a, gone, backend.MaxMemberTTL)
	w.await(t, "both members", func(_ int, s []backend.Member) bool { return len(s) == 2 })

	require.NoError(t, f.b.Leave(f.ctx, gone.Instance), "Leave through the other backend value")
	set := w.await(t, "the member that left gone", func(_ int, s []backend.Member) bool { return !hasInstance(s, gone.Instance) })
	assert.Equal(t, []backend.Member{stay}, set, "the other member stays")

	require.NoError(t, f.a.Leave(f.ctx, gone.Instance), "leaving twice")
	require.NoError(t, f.a.Leave(f.ctx, f.prefix+"never stored"), "leaving an instance never stored")

	// A member that left and beats again is back.
	f.beat(f.a, gone, backend.MaxMemberTTL)
	f.leaveAfter(gone.Instance)
	w.await(t, "the member back", func(_ int, s []backend.Member) bool { return has(s, gone) })
}

// A member not beaten again is gone once its ttl has passed, and the watch
// says so; the member beaten with a long ttl stays.
func testMemberExpiry(t *testing.T, f *memberFixture) {
	w := f.watch(f.b)
	long := backend.Member{Instance: f.prefix + "long", Group: "g"}
	short := backend.Member{Instance: f.prefix + "short", Group: "g"}
	f.leaveAfter(long.Instance)
	f.beat(f.a, long, backend.MaxMemberTTL)
	start := time.Now()
	f.beat(f.a, short, backend.MinMemberTTL)
	w.await(t, "the short-lived member", func(_ int, s []backend.Member) bool { return has(s, short) })
	set := w.await(t, "the short-lived member gone", func(_ int, s []backend.Member) bool { return !hasInstance(s, short.Instance) })
	gone := time.Since(start)
	t.Logf("a member of ttl %v was seen gone %v after its beat", backend.MinMemberTTL, gone)
	assert.GreaterOrEqual(t, gone, backend.MinMemberTTL-100*time.Millisecond, "not gone before its ttl")
	assert.Equal(t, []backend.Member{long}, set, "the long-lived member stays")
}

// A member beaten every 300 ms with the shortest ttl stays for several ttls:
// no set the watch delivers in that time leaves it out.
func testMemberKeptAlive(t *testing.T, f *memberFixture) {
	w := f.watch(f.b)
	m := backend.Member{Instance: f.prefix + "alive", Group: "g"}
	f.leaveAfter(m.Instance)
	f.beat(f.a, m, backend.MinMemberTTL)
	w.await(t, "the member", func(_ int, s []backend.Member) bool { return has(s, m) })
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		<-tick.C
		f.beat(f.a, m, backend.MinMemberTTL)
	}
	sets := w.all()
	first := slices.IndexFunc(sets, func(s []backend.Member) bool { return has(s, m) })
	require.GreaterOrEqual(t, first, 0)
	for i, s := range sets[first:] {
		assert.True(t, has(s, m), "set %d of the watch lost the member while it beat: %v", first+i, s)
	}
}

// 100 members beaten at once are all seen, each with its group.
func testMemberMany(t *testing.T, f *memberFixture) {
	w := f.watch(f.b)
	const n = 100
	want := make([]backend.Member, n)
	names := make([]string, n)
	for i := range want {
		want[i] = backend.Member{Instance: fmt.Sprintf("%sm%03d", f.prefix, i), Group: fmt.Sprintf("g%d", i%7)}
		names[i] = want[i].Instance
	}
	f.leaveAfter(names...)
	var wg sync.WaitGroup
	for i, m := range want {
		s := f.a
		if i%2 == 1 {
			s = f.b
		}
		wg.Go(func() { assert.NoError(t, s.Beat(f.ctx, m, time.Minute), "Beat %q", m.Instance) })
	}
	wg.Wait()
	set := w.await(t, "all 100 members", func(_ int, s []backend.Member) bool { return len(s) == n })
	assert.Equal(t, want, set)
}

// Instance names and groups that are paths, subject wildcards, white space or
// not ASCII, and the longest ones, come back exactly as stored.
func testMemberNames(t *testing.T, f *memberFixture) {
	w := f.watch(f.b)
	suffixes := []string{"a.b", "*", ">", "a.*.>", "../x", "/", "with spaces", "tab\there", "ünïcode ✓", "$KV.x.y", "lease.x.1", "=", ".", ""}
	groups := []string{"", "g.*", ">", "ünïcode ✓", strings.Repeat("é", backend.MaxMemberGroup/2)}
	var want []backend.Member
	for i, s := range suffixes {
		want = append(want, backend.Member{Instance: f.prefix + s, Group: groups[i%len(groups)]})
	}
	longest := f.prefix + strings.Repeat("x", backend.MaxJobNameLen-len(f.prefix))
	require.Len(t, longest, backend.MaxJobNameLen)
	want = append(want, backend.Member{Instance: longest, Group: strings.Repeat("g", backend.MaxMemberGroup)})
	slices.SortFunc(want, func(x, y backend.Member) int { return strings.Compare(x.Instance, y.Instance) })
	for _, m := range want {
		f.leaveAfter(m.Instance)
		f.beat(f.a, m, time.Minute)
	}
	set := w.await(t, "every member", func(_ int, s []backend.Member) bool { return len(s) == len(want) })
	assert.Equal(t, want, set)

	// Each leaves alone: no name stands for another.
	for i, m := range want {
		require.NoError(t, f.a.Leave(f.ctx, m.Instance))
		w.await(t, fmt.Sprintf("%q gone", m.Instance), func(_ int, s []backend.Member) bool { return slices.Equal(s, want[i+1:]) })
	}
}

// Invalid members and ttls are refused with ErrInvalidMember.
func testMemberInvalid(t *testing.T, f *memberFixture) {
	ok := backend.Member{Instance: f.prefix + "ok", Group: "g"}
	cases := []struct {
		what string
		m    backend.Member
		ttl  time.Duration
	}{
		{"an empty instance", backend.Member{Group: "g"}, time.Minute},
		{"an instance too long", backend.Member{Instance: f.prefix + strings.Repeat("x", backend.MaxJobNameLen+1-len(f.prefix))}, time.Minute},
		{"an instance not UTF-8", backend.Member{Instance: f.prefix + "\xff"}, time.Minute},
		{"a group too long", backend.Member{Instance: ok.Instance, Group: strings.Repeat("g", backend.MaxMemberGroup+1)}, time.Minute},
		{"a group not UTF-8", backend.Member{Instance: ok.Instance, Group: "\xfe"}, time.Minute},
		{"a ttl of 0", ok, 0},
		{"a negative ttl", ok, -time.Second},
		{"a ttl below the least", ok, backend.MinMemberTTL - time.Millisecond},
		{"a ttl of 2h", ok, 2 * time.Hour},
	}
	for _, c := range cases {
		err := f.a.Beat(f.ctx, c.m, c.ttl)
		assert.ErrorIs(t, err, backend.ErrInvalidMember, "%s", c.what)
	}
	// The limits themselves are accepted.
	w := f.watch(f.b)
	f.leaveAfter(ok.Instance)
	f.beat(f.a, ok, backend.MaxMemberTTL)
	w.await(t, "the valid member", func(_ int, s []backend.Member) bool { return slices.Equal(s, []backend.Member{ok}) })
	f.beat(f.a, ok, backend.MinMemberTTL)
}

// WatchMembers calls fn at once, and returns nil soon after its context ends.
func testMemberWatchEnds(t *testing.T, f *memberFixture) {
	ctx, cancel := context.WithCancel(f.ctx)
	called := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- f.b.WatchMembers(ctx, func([]backend.Member) {
			select {
			case called <- struct{}{}:
			default:
			}
		})
	}()
	select {
	case <-called:
	case err := <-done:
		require.FailNow(t, "the watch ended before its first set", "%v", err)
	case <-time.After(memberWait):
		require.FailNow(t, "no first set")
	}
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "a watch returns nil when its context ends")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the watch did not return after its context ended")
	}
}
