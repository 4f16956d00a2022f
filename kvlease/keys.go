package kvlease

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Key prefixes inside the bucket; see the package documentation for the layout.
const (
	leasePrefix = "lease."
	runPrefix   = "run."
)

// runKeys are the two keys of one (job, slot).
type runKeys struct {
	lease string // lease.<job>.<slot>: the TTL'd lease
	run   string // run.<job>.<slot>: the run record
}

// jobToken encodes a job name as one key token. Job names may hold any character;
// base64url without padding uses only letters, digits, '-' and '_', all valid in a
// key and none a subject separator or wildcard.
func jobToken(job string) string { return base64.RawURLEncoding.EncodeToString([]byte(job)) }

// slotToken encodes a slot as its Unix time in milliseconds, the slot's precision.
func slotToken(slot time.Time) string { return strconv.FormatInt(slot.UnixMilli(), 10) }

func keysFor(job string, slot time.Time) runKeys {
	suffix := jobToken(job) + "." + slotToken(slot)
	return runKeys{lease: leasePrefix + suffix, run: runPrefix + suffix}
}

// parseKey splits a key of the layout back into its kind prefix ("lease." or
// "run."), job and slot.
func parseKey(key string) (prefix, job string, slot time.Time, err error) {
	for _, p := range []string{leasePrefix, runPrefix} {
		rest, ok := strings.CutPrefix(key, p)
		if !ok {
			continue
		}
		tok, ms, ok := strings.Cut(rest, ".")
		if !ok {
			break
		}
		name, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return "", "", time.Time{}, fmt.Errorf("kvlease: key %q: job token: %w", key, err)
		}
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return "", "", time.Time{}, fmt.Errorf("kvlease: key %q: slot: %w", key, err)
		}
		return p, string(name), time.UnixMilli(n), nil
	}
	return "", "", time.Time{}, fmt.Errorf("kvlease: key %q is not a lease or run key", key)
}
