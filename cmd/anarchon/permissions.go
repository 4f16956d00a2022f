package main

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/anarchon/anarchon/fleet"
	"github.com/anarchon/anarchon/jetstream"
	"github.com/anarchon/anarchon/kvlease"
)

// permissionsFlags are the names the permissions command writes the permissions
// for, besides --prefix and --inbox-prefix.
type permissionsFlags struct {
	registry      string
	subjectPrefix string
	streamPrefix  string
	leaseBucket   string
}

func (p *permissionsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.registry, "registry-bucket", fleet.DefaultRegistryBucket, "the registry's bucket")
	fs.StringVar(&p.subjectPrefix, "subject-prefix", jetstream.DefaultSubjectPrefix, "replica: the JetStream backend's subject prefix")
	fs.StringVar(&p.streamPrefix, "stream-prefix", jetstream.DefaultStreamPrefix, "replica: the JetStream backend's stream prefix")
	fs.StringVar(&p.leaseBucket, "lease-bucket", kvlease.DefaultBucket, "replica: the kvlease store's bucket")
}

// permissions prints a role's NATS permissions (fleet.Permissions) as a
// nats-server configuration block, or as JSON; it needs no server.
func (c *cli) permissions(args []string) error {
	if len(args) != 1 {
		return usagef("permissions takes one ROLE: viewer, operator or replica")
	}
	role := fleet.Role(args[0])
	cfg := fleet.PermissionsConfig{Prefix: c.prefix, RegistryBucket: c.perm.registry, InboxPrefix: c.inboxPrefix}
	if role == fleet.RoleReplica {
		js, err := jetstream.Permissions(jetstream.WithSubjectPrefix(c.perm.subjectPrefix), jetstream.WithStreamPrefix(c.perm.streamPrefix))
		if err != nil {
			return usagef("%v", err)
		}
		kv, err := kvlease.Permissions(kvlease.WithBucket(c.perm.leaseBucket))
		if err != nil {
			return usagef("%v", err)
		}
		cfg.Backend = append(js, kv...)
	}
	p, err := fleet.Permissions(role, cfg)
	if err != nil {
		return usagef("%v", err)
	}
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // subjects hold '>'
		return enc.Encode(p)
	}
	_, err = fmt.Fprint(c.stdout, p.Config())
	return err
}
