// Package embedded runs nats-server with JetStream inside the current
// process, for single-node setups and for tests: no external process, no
// port to pick, a real JetStream.
//
// Start returns a Server that is ready: it accepts connections and, unless
// Options.DisableJetStream is set, JetStream is enabled and has recovered
// its store. By default the server listens on no TCP port at all and
// clients reach it in-process through Server.Connect; set Options.Listen
// ("127.0.0.1:0" for a free port) to accept TCP clients at
// Server.ClientURL. Without Options.StoreDir the JetStream store is a
// temporary directory that Shutdown removes.
//
//	srv, err := embedded.Start(ctx, embedded.Options{})
//	if err != nil {
//		return err
//	}
//	defer srv.Shutdown()
//
//	nc, err := srv.Connect()
//	if err != nil {
//		return err
//	}
//	defer nc.Close()
//	js, err := jetstream.New(nc)
//
// # Failures never exit the process
//
// nats-server's own loggers call os.Exit on a fatal error, and nats-server
// reports some start-up failures only that way (a client or route port
// that cannot be bound, a JetStream store that cannot be opened). This
// package installs a logger that records the fatal error instead, and
// Start returns it wrapped in ErrStartFailed after shutting the half-started
// server down. It also sets NoSigs, so no signal handler is installed.
// nats-server's log lines go to Options.Logger, silent when nil.
//
// # Clusters
//
// StartCluster starts several servers on 127.0.0.1 routed to each other
// with clustered JetStream, each on its own store, and returns once the
// JetStream meta group has a leader that sees every node. Cluster.StopNode
// and Cluster.RestartNode stop a node and bring it back on the same store
// and ports, and Cluster.StreamLeader finds the node to stop in a failover
// test.
//
// # Guides
//
// [Backends] gives the production settings of a JetStream server, embedded or not.
//
// [Backends]: https://github.com/anarchon/anarchon/blob/main/docs/backends.md#on-a-production-server
package embedded
