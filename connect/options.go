package connect

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ServerURL is the servers to dial: URL, or nats://127.0.0.1:4222 when it is empty.
func (s *Settings) ServerURL() string {
	if strings.TrimSpace(s.URL) == "" {
		return nats.DefaultURL
	}
	return s.URL
}

// Options returns the nats.go options the settings ask for, then opts, which can
// add to or override them. Credentials are used as the nats CLI uses them: user
// (with password) first, else creds, else nkey, else user_jwt (with user_seed);
// a token is sent besides. A setting this package cannot apply is an error
// wrapping ErrInvalidContext that names it; so is a reference that cannot be
// read (env:// of an unset variable, a data: URI that is not base64).
func (s *Settings) Options(opts ...nats.Option) ([]nats.Option, error) {
	out, err := s.options()
	if err != nil {
		where := "settings"
		if s.Name != "" {
			where = fmt.Sprintf("%q", s.Name)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidContext, where, err)
	}
	return append(out, opts...), nil
}

func (s *Settings) options() ([]nats.Option, error) {
	if err := s.supported(); err != nil {
		return nil, err
	}
	var out []nats.Option
	switch {
	case s.User != "":
		password, err := literal("password", s.Password)
		if err != nil {
			return nil, err
		}
		out = append(out, nats.UserInfo(s.User, password))
	case s.Creds != "":
		opt, err := credsOption(s.Creds)
		if err != nil {
			return nil, err
		}
		out = append(out, opt)
	case s.NKey != "":
		opt, err := nkeyOption(s.NKey)
		if err != nil {
			return nil, err
		}
		out = append(out, opt)
	case s.UserJWT != "":
		jwt, err := literal("user_jwt", s.UserJWT)
		if err != nil {
			return nil, err
		}
		seed, err := literal("user_seed", s.UserSeed)
		if err != nil {
			return nil, err
		}
		if seed == "" {
			out = append(out, nats.UserJWT(func() (string, error) { return jwt, nil },
				func([]byte) ([]byte, error) { return nil, nil }))
		} else {
			out = append(out, nats.UserJWTAndSeed(jwt, seed))
		}
	}
	if s.Token != "" {
		token, err := literal("token", s.Token)
		if err != nil {
			return nil, err
		}
		out = append(out, nats.Token(token))
	}
	switch {
	case s.Cert != "" && s.Key != "":
		cert, err := filePath("cert", s.Cert)
		if err != nil {
			return nil, err
		}
		key, err := filePath("key", s.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, nats.ClientCert(cert, key))
	case s.Cert != "" || s.Key != "":
		return nil, errors.New("cert and key go together: give both, or neither")
	}
	if s.CA != "" {
		ca, err := filePath("ca", s.CA)
		if err != nil {
			return nil, err
		}
		out = append(out, nats.RootCAs(ca))
	}
	if s.TLSFirst {
		out = append(out, nats.TLSHandshakeFirst())
	}
	if s.InboxPrefix != "" {
		out = append(out, nats.CustomInboxPrefix(s.InboxPrefix))
	}
	return out, nil
}

// supported refuses the settings that need a program or a platform this package
// does not run, naming them.
func (s *Settings) supported() error {
	refuse := func(setting, why string) error {
		return fmt.Errorf("%s is not supported here (%s)", setting, why)
	}
	switch {
	case s.NSC != "":
		return refuse("nsc", "it runs the nsc program: put the credentials file nsc made in creds")
	case s.SocksProxy != "":
		return refuse("socks_proxy", "connect directly, or through a tunnel")
	case s.WinCertStore != "" || s.WinCertStoreMatch != "" || s.WinCertStoreMatchBy != "" || len(s.WinCACertsMatch) > 0:
		return refuse("the Windows certificate store", "give cert, key and ca as files")
	}
	for _, f := range []struct{ name, value string }{
		{"password", s.Password}, {"token", s.Token}, {"creds", s.Creds}, {"nkey", s.NKey},
		{"user_jwt", s.UserJWT}, {"user_seed", s.UserSeed}, {"cert", s.Cert}, {"key", s.Key}, {"ca", s.CA},
	} {
		if sc := schemeOf(f.value); sc == "op" || sc == "nsc" {
			return refuse(f.name+" "+sc+"://", "it runs another program: put the secret in a file, or in env://VARIABLE")
		}
	}
	return nil
}

// schemeOf returns the reference scheme a value begins with, of those the nats
// CLI resolves: file, env, data, op and nsc; "" for a plain value or path.
func schemeOf(v string) string {
	for _, s := range []string{"file://", "env://", "op://", "nsc://"} {
		if strings.HasPrefix(v, s) {
			return strings.TrimSuffix(s, "://")
		}
	}
	if strings.HasPrefix(v, "data:") {
		return "data"
	}
	return ""
}

// resolve reads a reference's value: a file (file://), a variable (env://NAME) or
// inline base64 (data:;base64,...).
func resolve(field, ref string) ([]byte, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
	}
	switch schemeOf(ref) {
	case "file":
		data, err := os.ReadFile(strings.TrimPrefix(ref, "file://"))
		if err != nil {
			return nil, fail("%v", err)
		}
		return data, nil
	case "env":
		name := strings.TrimPrefix(ref, "env://")
		v, ok := os.LookupEnv(name)
		if !ok || v == "" || name == "" {
			return nil, fail("the variable %q is not set", name)
		}
		return []byte(v), nil
	case "data":
		header, payload, ok := strings.Cut(strings.TrimPrefix(ref, "data:"), ",")
		if !ok || !strings.Contains(";"+header+";", ";base64;") {
			return nil, fail("a data: URI must be data:;base64,<base64>")
		}
		data, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			return nil, fail("a data: URI whose payload is not base64: %v", err)
		}
		return data, nil
	}
	return []byte(ref), nil
}

// literal is a secret given as a value (password, token, user_jwt, user_seed),
// or as a reference to one.
func literal(field, v string) (string, error) {
	if schemeOf(v) == "" {
		return v, nil
	}
	data, err := resolve(field, v)
	return strings.TrimSpace(string(data)), err
}

// filePath is a file given as a path or a file:// URI; cert, key and ca must be
// files, since nats.go reads them there.
func filePath(field, v string) (string, error) {
	switch schemeOf(v) {
	case "":
		return v, nil
	case "file":
		return strings.TrimPrefix(v, "file://"), nil
	}
	return "", fmt.Errorf("%s must be a file (a path or file://), not %s", field, v[:strings.Index(v, ":")+1])
}

// credsOption uses a credentials file, or the credentials a reference holds.
func credsOption(ref string) (nats.Option, error) {
	if path, err := filePath("creds", ref); err == nil {
		return nats.UserCredentials(path), nil
	}
	data, err := resolve("creds", ref)
	if err != nil {
		return nil, err
	}
	jwt, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return nil, fmt.Errorf("creds: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("creds: %w", err)
	}
	return nats.UserJWT(func() (string, error) { return jwt, nil }, kp.Sign), nil
}

// nkeyOption signs with an nkey seed file, or the seed a reference holds.
func nkeyOption(ref string) (nats.Option, error) {
	if path, err := filePath("nkey", ref); err == nil {
		opt, err := nats.NkeyOptionFromSeed(path)
		if err != nil {
			return nil, fmt.Errorf("nkey: %w", err)
		}
		return opt, nil
	}
	data, err := resolve("nkey", ref)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("nkey: %w", err)
	}
	return nats.Nkey(pub, kp.Sign), nil
}
