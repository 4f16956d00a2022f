// Package connect connects to NATS the way NATS users already do: through a NATS
// CLI context (`nats context add`, `nats context select`). The URLs, credentials,
// TLS files, inbox prefix and JetStream domain stay in the context file, so a
// program and the operator's `nats` CLI reach the same account the same way.
//
//	nc, js, err := connect.DialJetStream(ctx, "prod", nats.Name("billing"))
//	if err != nil {
//		return err
//	}
//	defer nc.Drain()
//	// js honours the context's jetstream_domain or jetstream_api_prefix.
//
// The package reads the files the `nats` CLI writes itself, with nothing but
// nats.go: $XDG_CONFIG_HOME/nats/context/<name>.json (~/.config/nats/context
// when XDG_CONFIG_HOME is unset), and the selected context's name in
// $XDG_CONFIG_HOME/nats/context.txt. [Load] reads one context into [Settings],
// which a program may change before it dials (the anarchon command's --server
// and --creds do that); [Settings.Options] turns them into nats.go options.
//
// What a context file may hold, and how it is read:
//
//   - url: one or more server URLs, comma-separated (nats://127.0.0.1:4222
//     when empty).
//   - user and password, token, creds, nkey, or user_jwt with user_seed: the
//     credentials. creds and nkey are files; a file's path may begin with ~ and
//     hold $VARIABLES, or be a file:// URI. Any of them may also be an env://NAME
//     URI (the variable's value) or a data:;base64, URI (the value inline).
//   - cert and key (a client certificate), ca (the authority to trust), tls_first
//     (the TLS handshake before the server's greeting): files, as above.
//   - inbox_prefix; jetstream_domain or jetstream_api_prefix (not both).
//   - description, color_scheme and jetstream_event_prefix are the nats CLI's own
//     and are ignored here.
//
// What needs a program or a platform this package does not run is refused with
// an error that names the setting, never ignored: op:// and nsc:// references,
// the old nsc setting, socks_proxy, and the Windows certificate store settings.
//
// Dial and DialJetStream give up when their ctx ends, as well as on nats.go's own
// dial timeout (nats.Timeout, 2s per server by default). Context and
// ContextJetStream, without a ctx, are bounded by that timeout alone (unless the
// options ask for retries with nats.RetryOnFailedConnect).
//
// # Guides
//
// [Connecting through a NATS context] shows it beside the rest of operating a fleet.
//
// [Connecting through a NATS context]: https://github.com/anarchon/anarchon/blob/main/docs/operating.md#connecting-through-a-nats-context
package connect
