package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
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
	dir := t.TempDir()
	bin := filepath.Join(dir, "sqlite-example")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	file := filepath.Join(dir, "shared.db")

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
