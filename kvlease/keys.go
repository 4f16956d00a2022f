package kvlease

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/anarchon/anarchon/backend"
)

// Key prefixes inside the bucket; see the package documentation for the layout.
const (
	leasePrefix = "lease."
	runPrefix   = "run."
	jobPrefix   = "job."
)

// jobKey is the job key of a run name (a job's, or an entry's).
func jobKey(name string) string { return jobPrefix + jobToken(name) }

// runKeys are the two keys of one (job, slot).
type runKeys struct {
	lease string // lease.<job>.<slot>: the TTL'd lease
	run   string // run.<job>.<slot>: the run record
}

// jobToken encodes a run name as key tokens: a job's name as one token, the run
// name of one of its entries (backend.EntryRunName) as two, <job>.<entry ID>. Names
// may hold any character; base64url without padding uses only letters, digits,
// '-' and '_', all valid in a key and none a subject separator or wildcard. So a
// pattern with one token for the job (lease.<job>.*) never matches an entry's
// keys, nor one of an entry's another entry's.
func jobToken(name string) string {
	if job, id, ok := backend.SplitEntryRunName(name); ok && job != "" && id != "" {
		return nameToken(job) + "." + nameToken(id)
	}
	return nameToken(name)
}

// nameToken encodes one name (a job's, an entry ID) as one key token.
func nameToken(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }

// parseNameKey returns the name in key, prefix and then one nameToken.
func parseNameKey(prefix, key string) (string, bool) {
	tok, ok := strings.CutPrefix(key, prefix)
	if !ok || tok == "" || strings.Contains(tok, ".") {
		return "", false
	}
	name, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", false
	}
	return string(name), true
}

// slotToken encodes a slot as its Unix time in milliseconds, the slot's precision.
func slotToken(slot time.Time) string { return strconv.FormatInt(slot.UnixMilli(), 10) }

func keysFor(job string, slot time.Time) runKeys {
	suffix := jobToken(job) + "." + slotToken(slot)
	return runKeys{lease: leasePrefix + suffix, run: runPrefix + suffix}
}

// parseRunToken decodes the tokens of a run name (jobToken's one or two).
func parseRunToken(tok string) (string, error) {
	jt, it, entry := strings.Cut(tok, ".")
	job, err := base64.RawURLEncoding.DecodeString(jt)
	if err != nil {
		return "", fmt.Errorf("job token: %w", err)
	}
	if !entry {
		return string(job), nil
	}
	id, err := base64.RawURLEncoding.DecodeString(it)
	if err != nil || strings.Contains(it, ".") {
		return "", fmt.Errorf("entry token %q: %w", it, err)
	}
	return backend.EntryRunName(string(job), string(id)), nil
}

// parseKey splits a key of the layout back into its kind prefix ("lease." or
// "run."), run name (a job's, or an entry's: backend.EntryRunName) and slot.
func parseKey(key string) (prefix, job string, slot time.Time, err error) {
	for _, p := range []string{leasePrefix, runPrefix} {
		rest, ok := strings.CutPrefix(key, p)
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, '.')
		if i < 0 {
			break
		}
		name, err := parseRunToken(rest[:i])
		if err != nil {
			return "", "", time.Time{}, fmt.Errorf("kvlease: key %q: %w", key, err)
		}
		n, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil {
			return "", "", time.Time{}, fmt.Errorf("kvlease: key %q: slot: %w", key, err)
		}
		return p, name, time.UnixMilli(n), nil
	}
	return "", "", time.Time{}, fmt.Errorf("kvlease: key %q is not a lease or run key", key)
}
