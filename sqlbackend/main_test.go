package sqlbackend_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/anarchon/anarchon/sqlbackend/internal/pgtest"
)

// pg is the PostgreSQL server the package's tests share, started by TestMain from
// the Debian package's binaries. The tests fail, never skip, when it cannot start.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	pg, err = pgtest.Start(pgtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: the tests need a PostgreSQL server and none could start:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pg.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping PostgreSQL:", err)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
