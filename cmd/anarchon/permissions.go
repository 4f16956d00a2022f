package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

func (c *cli) permissionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "permissions viewer|operator|replica",
		Short: "Print a role's NATS permissions as a nats-server configuration block",
		Long: `permissions prints the NATS permissions of a role (fleet.Permissions) as a nats-server
configuration block, or as JSON with --json, with the inbox prefix its users connect
with. It needs no server. --prefix and --inbox-prefix apply.`,
		Example:   "  anarchon permissions operator --inbox-prefix _INBOX_ana",
		ValidArgs: []string{string(fleet.RoleViewer), string(fleet.RoleOperator), string(fleet.RoleReplica)},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s takes one ROLE: viewer, operator or replica", path(cmd))
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return c.permissions(args[0]) },
	}
	c.perm.register(cmd.Flags())
	return cmd
}

func (p *permissionsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.registry, "registry-bucket", fleet.DefaultRegistryBucket, "the registry's bucket")
	fs.StringVar(&p.subjectPrefix, "subject-prefix", jetstream.DefaultSubjectPrefix, "replica: the JetStream backend's subject prefix")
	fs.StringVar(&p.streamPrefix, "stream-prefix", jetstream.DefaultStreamPrefix, "replica: the JetStream backend's stream prefix")
	fs.StringVar(&p.leaseBucket, "lease-bucket", kvlease.DefaultBucket, "replica: the kvlease store's bucket")
}

// permissions prints a role's NATS permissions (fleet.Permissions) as a
// nats-server configuration block, or as JSON; it needs no server.
func (c *cli) permissions(arg string) error {
	role := fleet.Role(arg)
	cfg := fleet.PermissionsConfig{Prefix: c.prefix, RegistryBucket: c.perm.registry, InboxPrefix: c.conn.inboxPrefix}
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
	if c.jsonOut() {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // subjects hold '>'
		return enc.Encode(p)
	}
	_, err = fmt.Fprint(c.stdout, p.Config())
	return err
}
