package natsutil

import (
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Changes collects the names of the settings a reconcile changes.
type Changes []string

// Set applies a change and records its name when differ is true.
func (c *Changes) Set(name string, differ bool, apply func()) {
	if differ {
		*c = append(*c, name)
		apply()
	}
}

// Match sets each of settings in upd to its value in want, where have differs, and
// records the names of those it set, in the order given.
func (c *Changes) Match(upd *jetstream.StreamConfig, have, want jetstream.StreamConfig, settings ...Setting) {
	for _, s := range settings {
		c.Set(s.Name, s.differ(&have, &want), func() { s.apply(upd, &want) })
	}
}

// Setting is one stream setting that a reconcile brings to the wanted value as it
// is, named as nats-server names it in the configuration.
type Setting struct {
	Name   string
	differ func(have, want *jetstream.StreamConfig) bool
	apply  func(upd, want *jetstream.StreamConfig)
}

// The settings both kvlease's bucket and jetstream's job streams want exactly as
// they configure them. Metadata is the exception to "exactly": only the entries
// wanted must be there (see MetadataLacks), the others are kept.
var (
	Subjects = Setting{"subjects",
		func(h, w *jetstream.StreamConfig) bool { return !slices.Equal(h.Subjects, w.Subjects) },
		func(u, w *jetstream.StreamConfig) { u.Subjects = w.Subjects }}
	MaxMsgsPerSubject = Setting{"max_msgs_per_subject",
		func(h, w *jetstream.StreamConfig) bool { return h.MaxMsgsPerSubject != w.MaxMsgsPerSubject },
		func(u, w *jetstream.StreamConfig) { u.MaxMsgsPerSubject = w.MaxMsgsPerSubject }}
	MaxMsgs = Setting{"max_msgs",
		func(h, w *jetstream.StreamConfig) bool { return h.MaxMsgs != w.MaxMsgs },
		func(u, w *jetstream.StreamConfig) { u.MaxMsgs = w.MaxMsgs }}
	MaxBytes = Setting{"max_bytes",
		func(h, w *jetstream.StreamConfig) bool { return h.MaxBytes != w.MaxBytes },
		func(u, w *jetstream.StreamConfig) { u.MaxBytes = w.MaxBytes }}
	Replicas = Setting{"num_replicas",
		func(h, w *jetstream.StreamConfig) bool { return h.Replicas != w.Replicas },
		func(u, w *jetstream.StreamConfig) { u.Replicas = w.Replicas }}
	Discard = Setting{"discard",
		func(h, w *jetstream.StreamConfig) bool { return h.Discard != w.Discard },
		func(u, w *jetstream.StreamConfig) { u.Discard = w.Discard }}
	DuplicateWindow = Setting{"duplicate_window",
		func(h, w *jetstream.StreamConfig) bool { return h.Duplicates != w.Duplicates },
		func(u, w *jetstream.StreamConfig) { u.Duplicates = w.Duplicates }}
	AllowDirect = Setting{"allow_direct",
		func(h, w *jetstream.StreamConfig) bool { return h.AllowDirect != w.AllowDirect },
		func(u, w *jetstream.StreamConfig) { u.AllowDirect = w.AllowDirect }}
	AllowMsgTTL = Setting{"allow_msg_ttl",
		func(h, w *jetstream.StreamConfig) bool { return h.AllowMsgTTL != w.AllowMsgTTL },
		func(u, w *jetstream.StreamConfig) { u.AllowMsgTTL = w.AllowMsgTTL }}
	Metadata = Setting{"metadata",
		func(h, w *jetstream.StreamConfig) bool { return MetadataLacks(h.Metadata, w.Metadata) },
		func(u, w *jetstream.StreamConfig) { u.Metadata = MergeMetadata(u.Metadata, w.Metadata) }}
)
