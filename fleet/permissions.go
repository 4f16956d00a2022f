package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anarchon/anarchon/internal/natsutil"
)

// Role is a kind of NATS user of a fleet, as Permissions grants it.
type Role string

// The roles.
const (
	// RoleViewer reads: jobs, history, active, schedule entries, calendars,
	// events and the registry. It changes nothing and answers nothing.
	RoleViewer Role = "viewer"
	// RoleOperator is a viewer that also triggers, backfills, pauses and resumes,
	// adds, updates, removes and triggers schedule entries, and stores and
	// deletes calendars.
	RoleOperator Role = "operator"
	// RoleReplica serves the fleet (Serve, Events) and runs the jobs: it answers
	// requests on their reply subjects, and its scheduler backend needs
	// JetStream (PermissionsConfig.Backend).
	RoleReplica Role = "replica"
)

// Roles are the roles Permissions knows, in order of what they may do.
var Roles = []Role{RoleViewer, RoleOperator, RoleReplica}

// DefaultResponseTTL is how long a replica may answer a request (its parts, a
// trigger's finished reply) under Permissions: nats-server's allow_responses
// expiry. A trigger --wait whose run lasts longer gets no finished reply; the run
// goes on and history shows how it ended.
const DefaultResponseTTL = time.Hour

// InboxPrefix is the inbox prefix of a role's connections by default:
// "_INBOX_" and the role. Each role's permissions allow its own inboxes only, so
// no role reads, or answers in place of a replica, the replies another role gets.
// Replicas answer only on reply subjects whose first token begins with _INBOX, so
// an inbox prefix of one's own must too.
// Users of one role share its inboxes: give a user a prefix of its own
// (PermissionsConfig.InboxPrefix, the command's --inbox-prefix) where two users of
// a role must not read each other's replies.
func InboxPrefix(role Role) string { return "_INBOX_" + string(role) }

// PermissionsConfig names what a role's permissions are about. The zero value is
// the defaults.
type PermissionsConfig struct {
	// Prefix is the fleet's subject prefix (WithPrefix). Defaults to DefaultPrefix.
	Prefix string
	// RegistryBucket is the registry's bucket (WithRegistryBucket). Defaults to
	// DefaultRegistryBucket.
	RegistryBucket string
	// InboxPrefix is the inbox prefix of the role's connections
	// (nats.CustomInboxPrefix). Defaults to InboxPrefix(role).
	InboxPrefix string
	// Backend are the subjects the replica's scheduler backend publishes to
	// (replicas only): jetstream.Permissions and kvlease.Permissions for the
	// JetStream backend with leases.
	Backend []string
}

// RolePermissions are one role's NATS permissions, as a nats-server user's
// permissions block has them: everything else is refused.
type RolePermissions struct {
	Role Role `json:"role"`
	// InboxPrefix is the inbox prefix the role's connections must use
	// (nats.CustomInboxPrefix): Subscribe allows no other inbox.
	InboxPrefix string   `json:"inbox_prefix"`
	Publish     []string `json:"publish"`
	Subscribe   []string `json:"subscribe"`
	// Responses, when set, lets the role publish on the reply subject of each
	// request it receives (nats-server's allow_responses): any number of
	// messages (the parts of a reply, a trigger's two replies) for TTL.
	Responses *Responses `json:"allow_responses,omitempty"`
}

// Responses is nats-server's allow_responses: Max messages (-1: any number) on a
// request's reply subject within TTL of the request.
type Responses struct {
	Max int
	TTL time.Duration
}

// MarshalJSON writes r as the configuration does: {"max":-1,"expires":"1h0m0s"}.
func (r Responses) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Max     int    `json:"max"`
		Expires string `json:"expires"`
	}{r.Max, r.TTL.String()})
}

// Permissions returns the NATS permissions of role for the fleet c names, the
// permissions the documentation lists (and `anarchon permissions ROLE` prints):
//
//   - viewer: request jobs, history, active, and list and get entries and calendars; the registry's direct get (no
//     consumer, no key-value watch); subscribe to its inboxes and to events. Not
//     micro's $SRV subjects: micro answers them on any reply subject, which would
//     let a viewer have a replica publish where it names.
//   - operator: a viewer that also requests trigger, backfill, pause, resume,
//     pauseall, resumeall, adds, updates, removes and triggers entries, and
//     puts and deletes calendars.
//   - replica: subscribe to every endpoint, $SRV, its inboxes and the stream
//     update advisories (the JetStream backend follows them); publish events,
//     its registry entry and what the registry and c.Backend need; answer
//     requests (Responses) instead of publishing on anyone's inbox.
//
// The JetStream subjects are under the default API prefix ($JS.API).
func Permissions(role Role, c PermissionsConfig) (RolePermissions, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.RegistryBucket == "" {
		c.RegistryBucket = DefaultRegistryBucket
	}
	if c.InboxPrefix == "" {
		c.InboxPrefix = InboxPrefix(role)
	}
	if err := validPrefix(c.Prefix); err != nil {
		return RolePermissions{}, err
	}
	if err := WithRegistryBucket(c.RegistryBucket)(&config{role: roleService}); err != nil {
		return RolePermissions{}, err
	}
	if err := checkInboxPrefix(c.InboxPrefix); err != nil {
		return RolePermissions{}, err
	}
	if len(c.Backend) > 0 && role != RoleReplica {
		return RolePermissions{}, fmt.Errorf("%w: Backend applies to the replica role only", ErrInvalidOption)
	}
	p := subjects(c.Prefix)
	api := jetstream.DefaultAPIPrefix
	srv := []string{"$SRV.*." + ServiceName, "$SRV.*." + ServiceName + ".*"}
	inbox := c.InboxPrefix + ".>"
	reads := []string{p.fleet(verbJobs), p.fleet(verbHistory) + ".*", p.fleet(verbActive) + ".*", p.fleet(verbPreview) + ".*", p.fleet(verbWhy) + ".*",
		p.fleet(verbEntries) + ".*." + opList, p.fleet(verbEntries) + ".*." + opGet, p.calendar(opList), p.calendar(opGet)}
	out := RolePermissions{Role: role, InboxPrefix: c.InboxPrefix}
	switch role {
	case RoleViewer, RoleOperator:
		out.Publish = append(reads, api+"DIRECT.GET.KV_"+c.RegistryBucket)
		if role == RoleOperator {
			out.Publish = append(out.Publish, p.fleet(verbTrigger)+".*", p.fleet(verbBackfill)+".*", p.fleet(verbPause)+".*", p.fleet(verbResume)+".*",
				p.fleet(verbPauseAll), p.fleet(verbResumeAll),
				p.fleet(verbEntries)+".*."+opAdd, p.fleet(verbEntries)+".*."+opUpdate, p.fleet(verbEntries)+".*."+opRemove,
				p.fleet(verbEntries)+".*."+opTrigger, p.calendar(opPut), p.calendar(opDelete))
		}
		out.Subscribe = []string{inbox, p.fleet(verbEvents) + ".*"}
	case RoleReplica:
		out.Publish = append([]string{p.fleet(verbEvents) + ".*"},
			natsutil.BucketPermissions(api, c.RegistryBucket, JobToken(c.Prefix)+".>")...)
		for _, s := range c.Backend {
			if !slices.Contains(out.Publish, s) {
				out.Publish = append(out.Publish, s)
			}
		}
		out.Subscribe = []string{p.fleet(verbJobs), p.fleet(verbPauseAll), p.fleet(verbResumeAll),
			p.fleet(verbTrigger) + ".*", p.fleet(verbBackfill) + ".*", p.fleet(verbPause) + ".*", p.fleet(verbResume) + ".*",
			p.fleet(verbHistory) + ".*", p.fleet(verbActive) + ".*", p.fleet(verbPreview) + ".*", p.fleet(verbWhy) + ".*",
			p.fleet(verbEntries) + ".*.*", p.fleet(verbCalendars) + ".*", "$SRV.*", srv[0], srv[1], inbox,
			// The JetStream backend follows its job streams' updates (another
			// replica widening a duplicate window): jetstream.StreamUpdatedSubject.
			"$JS.EVENT.ADVISORY.STREAM.UPDATED.*"}
		out.Responses = &Responses{Max: -1, TTL: DefaultResponseTTL}
	default:
		return RolePermissions{}, fmt.Errorf("%w: role %q: one of %v", ErrInvalidOption, role, Roles)
	}
	return out, nil
}

// checkInboxPrefix accepts an inbox prefix a replica answers on (replyAddress):
// subject tokens without wildcards or white space, the first beginning with _INBOX.
func checkInboxPrefix(p string) error {
	first, _, _ := strings.Cut(p, ".")
	if !strings.HasPrefix(first, "_INBOX") || strings.ContainsAny(p, "*> \t\r\n") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
		return fmt.Errorf("%w: inbox prefix %q: replicas answer only on inboxes, subject tokens without wildcards or white space, the first beginning with _INBOX",
			ErrInvalidOption, p)
	}
	return nil
}

// Config writes p as a nats-server configuration block: the permissions of a user
// (authorization { users: [ {user: …, password: …, permissions: <this>} ] }).
func (p RolePermissions) Config() string {
	var b strings.Builder
	list := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	fmt.Fprintf(&b, "# anarchon %s: connect with the inbox prefix %s\n", p.Role, p.InboxPrefix)
	fmt.Fprintf(&b, "permissions: {\n")
	fmt.Fprintf(&b, "  publish: { allow: %s }\n", list(p.Publish))
	fmt.Fprintf(&b, "  subscribe: { allow: %s }\n", list(p.Subscribe))
	if p.Responses != nil {
		fmt.Fprintf(&b, "  allow_responses: { max: %d, expires: %q }\n", p.Responses.Max, p.Responses.TTL.String())
	}
	b.WriteString("}\n")
	return b.String()
}
