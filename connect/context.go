package connect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Settings are one NATS context: what `nats context add` wrote in its file. The
// field names are the file's keys. A program may change them before it dials, the
// way the nats CLI's flags override the context's values.
type Settings struct {
	// Name is the context's name (its file's, without .json); empty for settings
	// made without a file.
	Name string `json:"-"`

	Description string `json:"description,omitempty"`
	// URL is one or more server URLs, comma-separated; nats://127.0.0.1:4222
	// when empty.
	URL string `json:"url,omitempty"`

	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
	Creds    string `json:"creds,omitempty"`
	NKey     string `json:"nkey,omitempty"`
	UserJWT  string `json:"user_jwt,omitempty"`
	UserSeed string `json:"user_seed,omitempty"`

	Cert     string `json:"cert,omitempty"`
	Key      string `json:"key,omitempty"`
	CA       string `json:"ca,omitempty"`
	TLSFirst bool   `json:"tls_first,omitempty"`

	InboxPrefix   string `json:"inbox_prefix,omitempty"`
	JSDomain      string `json:"jetstream_domain,omitempty"`
	JSAPIPrefix   string `json:"jetstream_api_prefix,omitempty"`
	JSEventPrefix string `json:"jetstream_event_prefix,omitempty"`
	ColorScheme   string `json:"color_scheme,omitempty"`

	// The settings below need a program or a platform this package does not
	// run: a context that sets one is refused by Options, never half-applied.
	NSC                 string   `json:"nsc,omitempty"`
	SocksProxy          string   `json:"socks_proxy,omitempty"`
	WinCertStore        string   `json:"windows_cert_store,omitempty"`
	WinCertStoreMatchBy string   `json:"windows_cert_match_by,omitempty"`
	WinCertStoreMatch   string   `json:"windows_cert_match,omitempty"`
	WinCACertsMatch     []string `json:"windows_ca_certs_match,omitempty"`
}

// maxContextFile bounds a context file: what the nats CLI writes is under 2 KiB.
const maxContextFile = 1 << 20

// maxSelectedFile bounds context.txt: a context's name, a file's.
const maxSelectedFile = 4 << 10

// ConfigDir is where the nats CLI keeps its contexts: $XDG_CONFIG_HOME/nats, or
// ~/.config/nats when XDG_CONFIG_HOME is unset.
func ConfigDir() (string, error) {
	if dir := os.Getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no home directory to find contexts in: %w", ErrInvalidContext, err)
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// contextDir is the directory of the context files.
func contextDir() (string, error) {
	dir, err := ConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "context"), nil
}

// Selected returns the name of the context selected with `nats context select`,
// or "" when none is.
func Selected() (string, error) {
	dir, err := ConfigDir()
	if err != nil {
		return "", err
	}
	data, err := readLimited(filepath.Join(dir, "context.txt"), maxSelectedFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w: reading the selected context: %w", ErrInvalidContext, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Names lists the contexts there are, sorted.
func Names() ([]string, error) {
	dir, err := contextDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing %s: %w", ErrInvalidContext, dir, err)
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() && name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// validName refuses the names the nats CLI refuses: empty, with "..", "/" or "\".
func validName(name string) error {
	if name == "" || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf(`%w: %q is not a context name (not empty, no "..", "/" or "\")`, ErrInvalidContext, name)
	}
	return nil
}

// Load reads the context called name; "" means the selected context, and is an
// error wrapping ErrNoContextSelected when none is selected. An unknown name is an
// error wrapping ErrContextNotFound that says where contexts were looked for and
// which exist; a file that is not a context wraps ErrInvalidContext. Paths in it
// are expanded (~ and $VARIABLES), as the nats CLI does.
func Load(name string) (*Settings, error) {
	if name == "" {
		selected, err := Selected()
		if err != nil {
			return nil, err
		}
		if selected == "" {
			dir, _ := contextDir()
			return nil, fmt.Errorf("%w: pass a context name, or select one with `nats context select NAME` (contexts in %s: %s)",
				ErrNoContextSelected, dir, known())
		}
		name = selected
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	dir, err := contextDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".json")
	data, err := readLimited(path, maxContextFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %q is not in %s (known: %s)", ErrContextNotFound, name, dir, known())
	case err != nil:
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidContext, name, err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %q (%s): %w", ErrInvalidContext, name, path, err)
	}
	s.Name = name
	return s, nil
}

// Parse reads a context file's contents, expanding ~ and $VARIABLES in its
// paths.
func Parse(data []byte) (*Settings, error) {
	var s Settings
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("not a NATS context file: %w", err)
	}
	for _, p := range []*string{&s.Creds, &s.NKey, &s.Cert, &s.Key, &s.CA} {
		*p = expandPath(*p)
	}
	return &s, nil
}

// readLimited reads the file at path, refusing one of more than limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s is larger than %d bytes: not what the nats CLI writes", path, limit)
	}
	return data, err
}

// expandPath expands $VARIABLES, then a leading ~, in a path or file:// URI;
// other references (env://, data:) are left as they are.
func expandPath(p string) string {
	if p == "" || schemeOf(p) != "" && schemeOf(p) != "file" {
		return p
	}
	p = os.ExpandEnv(p)
	rest, isURI := strings.CutPrefix(p, "file://")
	if strings.HasPrefix(rest, "~") {
		if home, err := os.UserHomeDir(); err == nil {
			rest = home + rest[1:]
		}
	}
	if isURI {
		return "file://" + rest
	}
	return rest
}

// known lists the context names for error messages.
func known() string {
	names, err := Names()
	if err != nil || len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
