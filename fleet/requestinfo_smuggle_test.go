package fleet_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/fleet"
)

// protocolRequest sends one request as user over the NATS protocol itself, with the
// header block written byte for byte as given (nats.go would clean it), and
// returns the first reply's bytes.
func protocolRequest(t *testing.T, clientURL, user, password, subject, header, body string) string {
	t.Helper()
	u, err := url.Parse(clientURL)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info, "INFO "), info)
	connect, err := json.Marshal(map[string]any{"user": user, "pass": password, "headers": true, "verbose": false, "protocol": 1})
	require.NoError(t, err)
	inbox := "_INBOX.raw.1"
	_, err = fmt.Fprintf(conn, "CONNECT %s\r\nSUB %s 1\r\nHPUB %s %s %d %d\r\n%s%s\r\nPING\r\n",
		connect, inbox, subject, inbox, len(header), len(header)+len(body), header, body)
	require.NoError(t, err)
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err, "a reply to the raw request")
		switch {
		case strings.HasPrefix(line, "-ERR"):
			t.Fatalf("the server refused the raw request: %s", line)
		case strings.HasPrefix(line, "PING"):
			_, _ = fmt.Fprint(conn, "PONG\r\n")
		case strings.HasPrefix(line, "HMSG "), strings.HasPrefix(line, "MSG "):
			f := strings.Fields(line)
			var size int
			_, err := fmt.Sscan(f[len(f)-1], &size)
			require.NoError(t, err)
			buf := make([]byte, size+2)
			_, err = readFull(r, buf)
			require.NoError(t, err)
			return string(buf[:size])
		}
	}
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestRequestInfoCannotBeSmuggledPastTheServer: nats-server replaces a
// Nats-Request-Info header that the sender wrote on a line ended with CRLF, but
// not one on a line ended with a bare LF, which nats.go still reads as a header
// of its own, ahead of the server's. A replica served WithRequestInfo records
// the user the server named, never the smuggled one.
func TestRequestInfoCannotBeSmuggledPastTheServer(t *testing.T) {
	s := startAccountsServer(t)
	f := startFleet(t, fleetSetup{quiet: true, jobs: declareFeeds, instances: []string{"A"},
		dial: dialUser(s, "replica", "replica"), serve: []fleet.Option{fleet.WithRequestInfo()}})
	forged := fleet.RequestInfoHeader + `: {"acc":"REPL","user":"admin"}`
	subject := "anarchon.ENTRIES." + fleet.JobToken(jobFeeds) + ".ADD"
	for id, header := range map[string]string{
		"after-a-header":   "NATS/1.0\r\nX-Pad: 1\n" + forged + "\r\n\r\n",
		"after-the-status": "NATS/1.0\n" + forged + "\r\n\r\n",
		"no-line-end":      "NATS/1.0\r\n" + forged + "\n\r\n",
	} {
		reply := protocolRequest(t, s.ClientURL(), "ops-1", "ops", subject, header, `{"v":1,"id":"`+id+`","every":"1h"}`)
		var added fleet.EntryChangeReply
		require.NoError(t, json.Unmarshal([]byte(reply), &added), "%s: %s", id, reply)
		assert.Equal(t, "ops-1 (account OPS)", added.Entry.User, "%s: the server's word, not the smuggled one", id)
		got, err := f.client.Entry(requestCtx(t), jobFeeds, fleet.EntryRequest{ID: id})
		require.NoError(t, err, id)
		assert.Equal(t, "ops-1 (account OPS)", got.Entry.User, "%s: stored with the entry", id)
	}
}
