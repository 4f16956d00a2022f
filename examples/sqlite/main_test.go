package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anarchon/anarchon/scheduler"
	"github.com/anarchon/anarchon/sqlbackend"
)

// TestThreeProcessesOneFile builds the program and starts it three times, as three
// processes, on one SQLite file: every slot runs once, in the processes' output and
// in the file's history. Then one more start on the same file prints the earlier
// processes' history: it survives restarts.
func TestThreeProcessesOneFile(t *testing.T) {
	bin, file := buildProgram(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		cmd := exec.CommandContext(ctx, bin, "-db", file, "-instance", fmt.Sprint("p", i), "-every", "500ms", "-for", "5s")
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()
	ranBy := map[string][]string{} // slot → processes that printed a run of it
	for i := range 3 {
		require.NoError(t, errs[i], "process p%d:\n%s", i, outs[i].String())
		for line := range strings.Lines(outs[i].String()) {
			if rest, ok := strings.CutPrefix(line, "slot "); ok {
				slot, _, _ := strings.Cut(rest, " ")
				ranBy[slot] = append(ranBy[slot], fmt.Sprint("p", i))
			}
		}
	}
	require.GreaterOrEqual(t, len(ranBy), 6, "slots ran in 5s at 500ms: outputs:\n%s\n%s\n%s", outs[0].String(), outs[1].String(), outs[2].String())
	for slot, by := range ranBy {
		assert.Len(t, by, 1, "slot %s ran on %v", slot, by)
	}

	// The file's history: one record per slot, ok, by the process that printed it.
	db, err := sqlbackend.OpenSQLite(file)
	require.NoError(t, err)
	defer db.Close()
	hist := history(t, db)
	slots := map[string]int{}
	for _, r := range hist {
		slot := r.Slot.UTC().Format(time.RFC3339Nano)
		slots[slot]++
		assert.Equal(t, scheduler.StatusOK, r.Status, "slot %s", slot)
		if by := ranBy[slot]; assert.Len(t, by, 1, "slot %s is in the file but no process printed it", slot) {
			assert.Equal(t, by[0], r.Instance, "slot %s", slot)
		}
	}
	for slot, n := range slots {
		assert.Equal(t, 1, n, "slot %s has %d records", slot, n)
	}
	assert.Len(t, slots, len(ranBy), "every slot printed is in the file")

	// A restart on the same file sees what the three processes left.
	var again bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-db", file, "-instance", "p3", "-for", "1s", "-history", "3")
	cmd.Stdout, cmd.Stderr = &again, &again
	require.NoError(t, cmd.Run(), again.String())
	newest := hist[0]
	assert.Contains(t, again.String(), "history: "+newest.Slot.UTC().Format(time.RFC3339Nano)+" ok "+newest.Instance,
		"the restarted process prints the newest run of the earlier processes")
	assert.Contains(t, again.String(), fmt.Sprintf("history holds %d records", len(history(t, db))))
	t.Logf("3 processes ran %d slots, each once; a fourth start printed the earlier history", len(ranBy))
}

// TestKilledProcessIsTakenOver starts the program three times on one file with runs
// that work 1.5s under a 1s lease, and kills (SIGKILL) the first process that
// starts a run, mid-run: another process takes that run over as attempt 2 once the
// lease expired, and no slot ends ok twice.
func TestKilledProcessIsTakenOver(t *testing.T) {
	bin, file := buildProgram(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var (
		mu         sync.Mutex
		outs       [3]strings.Builder
		victim     = -1
		victimSlot string
		wg         sync.WaitGroup
		errs       [3]error
	)
	for i := range 3 {
		cmd := exec.CommandContext(ctx, bin, "-db", file, "-instance", fmt.Sprint("p", i),
			"-every", "1s", "-work", "1500ms", "-lease", "1s", "-for", "8s", "-history", "0")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = cmd.Stdout
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				mu.Lock()
				outs[i].WriteString(line + "\n")
				if rest, ok := strings.CutPrefix(line, "slot "); ok && victim == -1 {
					// The first run started anywhere: its process dies mid-run.
					victim, victimSlot = i, rest[:strings.IndexByte(rest, ' ')]
					_ = cmd.Process.Kill()
				}
				mu.Unlock()
			}
			errs[i] = cmd.Wait()
		})
	}
	wg.Wait()
	require.NotEqual(t, -1, victim, "no process started a run")
	for i := range 3 {
		if i == victim {
			assert.Error(t, errs[i], "p%d was killed", i)
			continue
		}
		require.NoError(t, errs[i], "p%d:\n%s", i, outs[i].String())
	}
	db, err := sqlbackend.OpenSQLite(file)
	require.NoError(t, err)
	defer db.Close()
	hist := history(t, db)
	ok := map[string]int{}
	var attempts []scheduler.RunRecord
	for _, r := range hist {
		slot := r.Slot.UTC().Format(time.RFC3339Nano)
		if r.Status == scheduler.StatusOK {
			ok[slot]++
		}
		if slot == victimSlot {
			attempts = append(attempts, r)
		}
	}
	for slot, n := range ok {
		assert.Equal(t, 1, n, "slot %s ended ok %d times", slot, n)
	}
	require.Len(t, attempts, 2, "the killed process's slot %s has its attempt and the takeover: %+v", victimSlot, attempts)
	assert.Equal(t, 2, attempts[0].Attempt)
	assert.Equal(t, scheduler.StatusOK, attempts[0].Status, "the takeover finished the run")
	assert.NotEqual(t, fmt.Sprint("p", victim), attempts[0].Instance)
	assert.Equal(t, fmt.Sprint("p", victim), attempts[1].Instance)
	assert.Equal(t, scheduler.StatusLost, attempts[1].Status, "the killed attempt is recorded lost by the backup")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("p%d killed mid-run on slot %s; %s took it over; %d slots ended ok", victim, victimSlot, attempts[0].Instance, len(ok))
}

// buildProgram builds the program into a temporary directory and returns it with
// the path of a SQLite file in the same directory.
func buildProgram(t *testing.T) (bin, file string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "sqlite-example")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin, filepath.Join(dir, "shared.db")
}

func history(t *testing.T, db *sql.DB) []scheduler.RunRecord {
	t.Helper()
	b, err := sqlbackend.New(db, sqlbackend.SQLite)
	require.NoError(t, err)
	hist, err := b.History(context.Background(), "report", 0)
	require.NoError(t, err)
	return hist
}

func TestInvalidFlags(t *testing.T) {
	for _, args := range [][]string{{"-every", "0s"}, {"-for", "-1s"}, {"-history", "-1"}, {"extra"}} {
		var out bytes.Buffer
		err := run(context.Background(), args, &out)
		assert.Error(t, err, "%v", args)
	}
}

// TestDefaultFileOutsideTheWorkingDirectory: without -db the file goes to the
// user's cache directory (else the temporary directory), never the working
// directory, and the first line names it.
func TestDefaultFileOutsideTheWorkingDirectory(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"cache directory", map[string]string{"XDG_CACHE_HOME": cache}, filepath.Join(cache, "anarchon", "sqlite-example.db")},
		{"no cache directory: the temporary one", map[string]string{"XDG_CACHE_HOME": "", "HOME": "", "TMPDIR": tmp},
			filepath.Join(tmp, "anarchon", "sqlite-example.db")},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			t.Chdir(t.TempDir())
			var out bytes.Buffer
			require.NoError(t, run(context.Background(), []string{"-every", "100ms", "-for", "300ms", "-history", "0"}, &out))
			first, _, _ := strings.Cut(out.String(), "\n")
			assert.Contains(t, first, " on "+c.want+" (sql/sqlite)")
			assert.FileExists(t, c.want)
			wd, err := os.Getwd()
			require.NoError(t, err)
			entries, err := os.ReadDir(wd)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing written in the working directory")
		})
	}
}
