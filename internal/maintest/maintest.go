// Package maintest runs a program's main in a child process of its test binary, so
// that a test sees what a person who runs the program sees: its exit code, its
// standard output and its standard error. A test package uses it in two places:
//
//	func TestMain(m *testing.M) {
//		maintest.Main(main) // in the child: runs main and exits; else returns
//		goleak.VerifyTestMain(m)
//	}
//
//	code, stdout, stderr := maintest.Run(t, 10*time.Second, "-h")
package maintest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// envArgs carries the child's command line, JSON-encoded.
const envArgs = "ANARCHON_MAINTEST_ARGS"

// Main does nothing in a test process that Run did not start. In a child of Run it
// sets os.Args to the arguments given to Run, calls main, and exits 0 when main
// returns (main's own os.Exit gives any other code).
func Main(main func()) {
	enc, ok := os.LookupEnv(envArgs)
	if !ok {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		os.Stderr.WriteString("maintest: bad " + envArgs + ": " + err.Error() + "\n")
		os.Exit(3)
	}
	os.Args = append([]string{os.Args[0]}, args...)
	main()
	os.Exit(0)
}

// Run starts the test binary again as the program, with args as its command line
// and no standard input, and waits for it to exit, at most timeout (then it is
// killed and the test fails). It returns the exit code and what the program wrote.
func Run(t testing.TB, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	enc, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("maintest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), envArgs+"="+string(enc))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("maintest: %v did not exit within %v; stderr: %s", args, timeout, errOut.String())
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatalf("maintest: %v: %v", args, err)
	}
	return 0, out.String(), errOut.String()
}

// CheckHelp runs the program as a person asking for help does, with -h and with
// --help: each must exit 0 and print usage (text containing usage) and no error
// line (text containing errLine, the program's error prefix).
func CheckHelp(t *testing.T, usage, errLine string) {
	t.Helper()
	for _, arg := range []string{"-h", "--help"} {
		code, stdout, stderr := Run(t, 30*time.Second, arg)
		out := stdout + stderr
		if code != 0 {
			t.Errorf("%s: exit code %d, want 0; stdout %q, stderr %q", arg, code, stdout, stderr)
		}
		if !strings.Contains(out, usage) {
			t.Errorf("%s: no %q in the output: %q", arg, usage, out)
		}
		if strings.Contains(out, errLine) {
			t.Errorf("%s: an error line (%q) in the output: %q", arg, errLine, out)
		}
	}
}
