package integration

import (
	"bytes"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A TCP proxy for the fault tests that cuts connections and loses acknowledgements.

// faultProxy is a TCP proxy in front of a NATS server that drops every connection
// now and then, in two ways: a plain cut (both sides closed at once, whatever is in
// flight either way is lost), and a lost acknowledgement: the proxy waits for a
// client's next write to the lease bucket (a lease key or run record, "PUB $KV."),
// forwards it, swallows everything the server sends that client from then on, and
// closes both sides a little later. The server applied a write whose answer never
// arrived.
type faultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	pairs map[*faultPair]struct{}

	wg                 sync.WaitGroup
	heal, closed       chan struct{} // stop dropping; stop everything
	healOnce, closeOne sync.Once

	drops, lostAckDrops, cut atomic.Int64
	// refuseUntil (Unix ns): connections accepted before it are closed at once (a
	// partition: the client cannot reach the server until it ends).
	refuseUntil atomic.Int64
	// lostWrites counts lease-bucket writes forwarded to the server whose answers
	// the proxy swallowed; swallowedReplies counts replies (MSG/HMSG to an _INBOX)
	// it swallowed in all; requestsInWindow counts publishes it forwarded to the
	// server while the answers were being swallowed.
	lostWrites, swallowedReplies, requestsInWindow atomic.Int64
}

type faultPair struct {
	client, server net.Conn
	// armed: mute the replies right after forwarding the next lease-bucket write.
	armed     atomic.Bool
	mute      atomic.Bool // drop server → client
	closeOnce sync.Once
}

func (p *faultPair) close() {
	p.closeOnce.Do(func() {
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// startFaultProxy listens on 127.0.0.1:0 and forwards to target (host:port).
func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, target: target, pairs: map[*faultPair]struct{}{}, heal: make(chan struct{}), closed: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if time.Now().UnixNano() < p.refuseUntil.Load() {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pair := &faultPair{client: c, server: s}
		p.mu.Lock()
		select {
		case <-p.closed:
			p.mu.Unlock()
			pair.close()
			return
		default:
		}
		p.pairs[pair] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(pair, pair.client, pair.server, false) })
		p.wg.Go(func() { p.pump(pair, pair.server, pair.client, true) })
	}
}

var (
	faultKVWrite = []byte("PUB $KV.") // PUB or HPUB to a KV bucket's subject
	faultReply   = []byte("MSG _INBOX.")
)

// pump copies from src to dst until either side fails, then closes the pair.
// fromServer: the server → client direction, which a lost-ack drop mutes.
func (p *faultProxy) pump(pair *faultPair, src, dst net.Conn, fromServer bool) {
	defer func() {
		pair.close()
		p.mu.Lock()
		delete(p.pairs, pair)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			switch {
			case fromServer && pair.mute.Load():
				p.swallowedReplies.Add(int64(bytes.Count(chunk, faultReply)))
				chunk = nil
			case !fromServer && pair.mute.Load():
				p.requestsInWindow.Add(int64(bytes.Count(chunk, []byte("PUB "))))
				p.lostWrites.Add(int64(bytes.Count(chunk, faultKVWrite)))
			case !fromServer && bytes.Contains(chunk, faultKVWrite) && pair.armed.CompareAndSwap(true, false):
				// Mute before the write reaches the server, so its answer cannot
				// slip through.
				pair.mute.Store(true)
				p.requestsInWindow.Add(int64(bytes.Count(chunk, []byte("PUB "))))
				p.lostWrites.Add(int64(bytes.Count(chunk, faultKVWrite)))
			}
			if len(chunk) > 0 {
				if _, werr := dst.Write(chunk); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF or closed: the pair is closing
		}
	}
}

// dropEvery drops all connections at random intervals in [lo, hi] until Heal or
// Close. Half the drops are lost-ack drops; when slot > 0, half of those are armed
// just before a multiple of slot, so that they catch that slot's claim writes.
func (p *faultProxy) dropEvery(lo, hi, slot time.Duration) {
	p.wg.Go(func() {
		for {
			wait := lo + rand.N(hi-lo+1)
			lostAck := rand.N(2) == 0
			if lostAck && slot > 0 && rand.N(2) == 0 {
				edge := time.Now().Add(wait).Truncate(slot).Add(slot)
				wait = time.Until(edge.Add(-5 * time.Millisecond))
			}
			t := time.NewTimer(wait)
			select {
			case <-p.heal:
				t.Stop()
				return
			case <-t.C:
			}
			p.drop(lostAck)
		}
	})
}

// drop closes every connection. A lost-ack drop first arms every connection, waits
// up to 300 ms for lease-bucket writes (each armed connection goes deaf to the
// server right after its next one), then mutes all replies for 30 ms before closing.
func (p *faultProxy) drop(lostAck bool) {
	pairs := p.snapshot()
	if lostAck {
		for _, pair := range pairs {
			pair.armed.Store(true)
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) && !p.anyMuted(pairs) {
			select {
			case <-time.After(2 * time.Millisecond):
			case <-p.heal:
				deadline = time.Time{}
			}
		}
		// Give the other clients' writes of the same moment a chance to be caught too.
		select {
		case <-time.After(10*time.Millisecond + rand.N(40*time.Millisecond)):
		case <-p.heal:
		}
		for _, pair := range pairs {
			pair.mute.Store(true)
		}
		select {
		case <-time.After(30 * time.Millisecond):
		case <-p.heal:
		}
		p.lostAckDrops.Add(1)
	}
	for _, pair := range pairs {
		pair.close()
	}
	p.drops.Add(1)
	p.cut.Add(int64(len(pairs)))
}

func (p *faultProxy) snapshot() []*faultPair {
	p.mu.Lock()
	defer p.mu.Unlock()
	pairs := make([]*faultPair, 0, len(p.pairs))
	for pair := range p.pairs {
		pairs = append(pairs, pair)
	}
	return pairs
}

func (p *faultProxy) anyMuted(pairs []*faultPair) bool {
	for _, pair := range pairs {
		if pair.mute.Load() {
			return true
		}
	}
	return false
}

// partition cuts every connection and refuses new ones for d: the clients behind the
// proxy cannot reach the server until it ends, then reconnect.
func (p *faultProxy) partition(d time.Duration) {
	p.refuseUntil.Store(time.Now().Add(d).UnixNano())
	for _, pair := range p.snapshot() {
		pair.close()
	}
	p.cut.Add(1)
}

// Heal stops dropping connections; the proxy keeps forwarding.
func (p *faultProxy) Heal() {
	p.healOnce.Do(func() { close(p.heal) })
}

// Close stops the proxy: no more connections, every pair closed, every goroutine
// returned.
func (p *faultProxy) Close() {
	p.Heal()
	p.closeOne.Do(func() { close(p.closed) })
	_ = p.ln.Close()
	for _, pair := range p.snapshot() {
		pair.close()
	}
	p.wg.Wait()
}
