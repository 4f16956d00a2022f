package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anarchon/anarchon/backend"
)

// RequestInfoHeader is the header nats-server sets on a request that crossed a
// service import into another account: the sender's account, and with the
// import's share: true its user (nats-server's ClientInfo as JSON).
const RequestInfoHeader = "Nats-Request-Info"

// serviceReplyPrefix begins the reply subject nats-server gives a request that
// crossed a service import: the replica answers there, and the server carries
// the answer back to the sender's inbox.
const serviceReplyPrefix = "_R_."

// WithRequestInfo has the replica record who sent each request as nats-server
// names them (Serve only): the user and account of the Nats-Request-Info header.
// The server sets that header on a request that crossed a service import into
// the replicas' account (the user only when the import says share: true) and
// replaces any the sender wrote. Within one account it sets none, and a client
// may write its own. So set this only where every user not trusted to name
// itself reaches the fleet from another account, through an import. The
// replica then also answers requests that came through an import (their reply
// subject begins with _R_.). The user is stored with the schedule entries it
// adds or changes (Entry.User) and logged with every change. docs/operating.md
// shows the accounts' configuration.
func WithRequestInfo() Option {
	return func(c *config) error {
		if err := c.only(roleService, "WithRequestInfo"); err != nil {
			return err
		}
		c.requestInfo = true
		return nil
	}
}

// requestInfo is the part of nats-server's ClientInfo a replica reads.
type requestInfo struct {
	Account string `json:"acc"`
	User    string `json:"user"`
}

// requestUser is who sent req as the server names them ("ops-1 (account OPS)"),
// with WithRequestInfo; "" without it, or when the header is absent or unread.
// The server's header is the last: it removes the sender's on lines ended with
// CRLF, not one on a line ended with LF alone, which nats.go reads as another.
func (f *Service) requestUser(req request) string {
	if !f.cfg.requestInfo {
		return ""
	}
	values := req.Header().Values(RequestInfoHeader)
	if len(values) == 0 || values[len(values)-1] == "" {
		return ""
	}
	raw := values[len(values)-1]
	if len(values) > 1 {
		f.log.Warn("fleet: a request carried more than one request info header; the server's, the last, is read",
			"subject", req.Subject(), "headers", len(values))
	}
	var ci requestInfo
	if err := json.Unmarshal([]byte(raw), &ci); err != nil {
		f.log.Debug("fleet: a request info header not read", "subject", req.Subject(), "err", err)
		return ""
	}
	return userText(ci)
}

type userKey struct{}

// withUser is ctx with the request's user (requestUser) for the handlers.
func withUser(ctx context.Context, user string) context.Context {
	if user == "" {
		return ctx
	}
	return context.WithValue(ctx, userKey{}, user)
}

// userOf is the request's user withUser put in ctx.
func userOf(ctx context.Context) string {
	user, _ := ctx.Value(userKey{}).(string)
	return user
}

// userText writes who a request info names, at most backend.MaxEntryText bytes.
func userText(ci requestInfo) string {
	user := oneLine(ci.User)
	if ci.Account != "" {
		acc := "account " + oneLine(ci.Account)
		if user == "" {
			user = acc
		} else {
			user += " (" + acc + ")"
		}
	}
	return backend.TruncateText(strings.TrimSpace(user), backend.MaxEntryText)
}

// replyAddress accepts the reply subject of a request a replica answers: none (a
// request that wants no answer), or an inbox, whose first token begins with
// _INBOX (nats.go's default, the roles' InboxPrefix); with WithRequestInfo also
// the server's reply subject of a request through an import. A replica answers
// with nats-server's allow_responses, which lets it publish on whatever subject
// a request names as its reply: another application's, a stream's, the
// registry's keys, the JetStream API. It answers on inboxes only.
func (f *Service) replyAddress(reply string) error {
	first, _, _ := strings.Cut(reply, ".")
	switch {
	case reply == "":
		return nil
	case strings.ContainsAny(reply, "*> \t\r\n"):
	case strings.HasPrefix(first, "_INBOX"):
		return nil
	case f.cfg.requestInfo && strings.HasPrefix(reply, serviceReplyPrefix) && len(reply) > len(serviceReplyPrefix):
		return nil
	}
	return fmt.Errorf("fleet: the reply subject %q is no inbox (_INBOX…): not answered", reply)
}
