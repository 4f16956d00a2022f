// Package pgtest starts a throwaway PostgreSQL server from the Debian postgresql
// package's binaries (initdb and pg_ctl under /usr/lib/postgresql/*/bin) in a
// temporary directory, on a free loopback port, for the tests and the benchmark.
// When the process runs as root (initdb refuses root), the server runs as the
// postgres user (or nobody) through runuser.
package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Options tune the server.
type Options struct {
	// Durable keeps PostgreSQL's default durability (fsync on every commit). Off,
	// the server runs with fsync=off: quicker, and enough for tests that restart
	// it cleanly.
	Durable bool
}

// Server is a running throwaway PostgreSQL server.
type Server struct {
	bin, dir, data string
	port           int
	asUser         string // run the binaries as this user (when root), "" as ourselves
	opts           Options

	mu      sync.Mutex
	stopped bool
}

// BinDir returns the directory of the newest installed PostgreSQL's binaries.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		return "", errors.New("pgtest: no PostgreSQL binaries in /usr/lib/postgresql/*/bin: install the Debian package postgresql (.ci/deps does)")
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) < version(found[j]) })
	return found[len(found)-1], nil
}

func version(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// Start creates a cluster in a new temporary directory and starts a server on a
// free loopback port (its unix socket in the same directory). Stop it with Stop,
// which also removes the directory.
func Start(opts Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	base := ""
	if os.Geteuid() == 0 && !traversable(os.TempDir()) {
		base = "/tmp" // the server's user must reach its directory
	}
	dir, err := os.MkdirTemp(base, "anarchon-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, data: filepath.Join(dir, "data"), opts: opts}
	if os.Geteuid() == 0 {
		name := "postgres"
		if _, err := user.Lookup(name); err != nil {
			name = "nobody"
		}
		u, err := user.Lookup(name)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root and no postgres or nobody user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.asUser = name
	}
	if out, err := s.run("initdb", "-D", s.data, "-U", "anarchon", "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		s.port, err = freePort()
		if err == nil {
			err = s.start()
		}
		if err == nil {
			return s, nil
		}
		if attempt == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// traversable reports whether every directory from / down to dir lets other users
// through (o+x).
func traversable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", s.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = s.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (s *Server) start() error {
	conf := []string{
		"-c listen_addresses=127.0.0.1",
		"-p " + strconv.Itoa(s.port),
		"-k " + s.dir,
		"-c max_connections=400",
		"-c shared_buffers=32MB",
	}
	if !s.opts.Durable {
		conf = append(conf, "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
	}
	out, err := s.run("pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", strings.Join(conf, " "), "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		return fmt.Errorf("pgtest: pg_ctl start on port %d: %w\n%s\n%s", s.port, err, out, log)
	}
	return nil
}

// DSN returns a connection string for database db ("" = the default database
// "postgres") as user anarchon over loopback TCP.
func (s *Server) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://anarchon@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Restart stops the server (fast: open connections are cut, transactions in
// flight are rolled back) and starts it again on the same port and data.
func (s *Server) Restart() error {
	if err := s.StopServer(); err != nil {
		return err
	}
	return s.StartServer()
}

// StopServer stops the server, keeping its data for StartServer.
func (s *Server) StopServer() error {
	if out, err := s.run("pg_ctl", "-D", s.data, "-w", "-m", "fast", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// StartServer starts a server stopped by StopServer, on the same port.
func (s *Server) StartServer() error { return s.start() }

// Stop stops the server and removes its directory. Stopping twice is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	// A server already stopped (StopServer) makes pg_ctl fail: nothing to do.
	_, _ = s.run("pg_ctl", "-D", s.data, "-w", "-m", "immediate", "stop")
	return os.RemoveAll(s.dir)
}
