package connect_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/anarchon/anarchon/connect"
)

// FuzzParse: any bytes as a context file are read or refused, never a panic, and
// settings read are turned into options or refused the same way.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "nats", "context", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"user":"u","password":"env://X","token":"data:;base64,dG9r","creds":"file://~/x.creds"}`))
	f.Add([]byte(`{"nkey":"data:;base64,!!","cert":"a","key":"op://v/i/k","windows_ca_certs_match":["x"]}`))
	f.Add([]byte(`{"url": 5}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := connect.Parse(data)
		if err != nil {
			return
		}
		_ = s.ServerURL()
		_, _ = s.Options()
	})
}
