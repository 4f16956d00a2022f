package natsutil

import (
	"maps"
	"strconv"
	"strings"
)

// LayoutKey is the stream metadata key that holds the layout version of an anarchon
// stream: a decimal number, raised when a release changes what the stream holds or
// how it is configured.
const LayoutKey = "anarchon.layout"

// Layout is how a stream's layout version compares with this release's.
type Layout int

const (
	// LayoutOlder: no version, one below ours, or one that is not a number. The
	// stream is brought up to ours.
	LayoutOlder Layout = iota - 1
	// LayoutSame: our version.
	LayoutSame
	// LayoutNewer: a later release set the stream up. It is left as it is, so that
	// the two releases of a rolling upgrade do not rewrite it back and forth; it
	// stays readable, since readers ignore what they do not know.
	LayoutNewer
)

// CompareLayout compares the layout version in meta with ours (a decimal number,
// as the metadata holds it). Versions compare as numbers: "10" is newer than "9".
func CompareLayout(meta map[string]string, ours string) Layout {
	o, _ := strconv.Atoi(ours)
	v, err := strconv.Atoi(strings.TrimSpace(meta[LayoutKey]))
	switch {
	case err != nil || v < o:
		return LayoutOlder
	case v > o:
		return LayoutNewer
	}
	return LayoutSame
}

// MetadataLacks reports whether have lacks an entry of want or holds it with
// another value. Other entries of have (the server's own "_nats." ones, an
// operator's) do not count.
func MetadataLacks(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return true
		}
	}
	return false
}

// MergeMetadata returns have with want's entries set over it.
func MergeMetadata(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = make(map[string]string, len(want))
	}
	maps.Copy(out, want)
	return out
}
