package modelcheck

// The mutants of backend/machine: every arrow of the machine broken in turn,
// to show that its table test or the model check notices. A mutant deletes one
// `case` of a switch in claim.go or settle.go (Claim, Settle, Heartbeat and
// their helpers), or inverts one condition of an expression switch's case, or
// inverts an if's condition or deletes its body (the arrows written so). Each
// is built in place of the original through `go test -overlay` (nothing in the
// work tree changes), then judged by backend/machine's tests and, when they
// pass, by the scheduler's TestModelCheck (without -race) on a few seeds: a
// mutant is caught when an invariant fails on a seed where it held before
// (the model check of the unchanged machine is run twice first, for the
// invariants that fail anyway), or the check stops (a livelock, a panic).
//
//	ANARCHON_MUTANTS=1 go test -run TestMachineMutants -timeout 6h ./internal/modelcheck/
//
// ANARCHON_MUTANTS=list lists them without running them;
// ANARCHON_MUTANTS_SEEDS: the model check's seeds (default 150);
// ANARCHON_MUTANTS_ONLY: a regular expression the mutants' names must match;
// ANARCHON_MUTANTS_OUT: a file the results are written to as well;
// ANARCHON_MUTANTS_MODEL=1: the model check alone judges every mutant.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mutant is one broken arrow: the file's text with one edit.
type mutant struct {
	name string
	file string // relative to the module root
	src  []byte
}

// machineFiles are the machine's files whose cases are broken.
var machineFiles = []string{"backend/machine/claim.go", "backend/machine/settle.go", "backend/machine/deadline.go"}

// equivalent are the mutants that change no answer and no stored state: the
// case they break decides nothing the cases before it left open.
var equivalent = map[string]string{
	// busy(earlierSlot) is asked only once no later slot is busy (first).
	"busy: case pos == earlierSlot && !o.Slot.Before(c.in.Slot) — deleted": "first asks for an earlier busy slot only once no later one is busy",
}

// knownFailing are the invariants, comma-separated, the model check fails on
// the unchanged code (reported apart): a mutant is not judged by them.
const knownFailing = ""

func TestMachineMutants(t *testing.T) {
	if os.Getenv("ANARCHON_MUTANTS") == "" {
		t.Skip("set ANARCHON_MUTANTS=1 to break each arrow of backend/machine in turn (slow: one build per mutant)")
	}
	root := moduleRoot(t)
	seeds := 150
	if s := os.Getenv("ANARCHON_MUTANTS_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("ANARCHON_MUTANTS_SEEDS=%q: want a positive number", s)
		}
		seeds = n
	}
	// The model check alone judges every mutant: how much it sees without
	// the table.
	modelOnly := os.Getenv("ANARCHON_MUTANTS_MODEL") != ""
	var only *regexp.Regexp
	if s := os.Getenv("ANARCHON_MUTANTS_ONLY"); s != "" {
		only = regexp.MustCompile(s)
	}
	var all []mutant
	for _, f := range machineFiles {
		ms, err := mutantsOf(root, f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ms...)
	}
	if os.Getenv("ANARCHON_MUTANTS") == "list" {
		for _, m := range all {
			if only == nil || only.MatchString(m.name) {
				t.Log(m.name)
			}
		}
		return
	}
	dir := t.TempDir()
	// The machine's tests that fail unchanged (rows added for a bug still
	// open) judge no mutant.
	out, _ := run(root, nil, 10*time.Minute, "go", "test", "-count=1", "-v", "./backend/machine/")
	tableArgs := []string{"test", "-count=1"}
	if failing := topFailures(out); len(failing) > 0 {
		tableArgs = append(tableArgs, "-skip", "^("+strings.Join(failing, "|")+")$")
		t.Logf("the machine's tests that fail unchanged judge no mutant: %s", strings.Join(failing, ", "))
	}
	base := map[string]bool{}
	for range 2 {
		out, _ := modelCheck(root, "", seeds)
		for k := range failures(out) {
			base[k] = true
		}
	}
	t.Logf("%d mutants; the model check of the unchanged machine fails %d (seed, invariant) pairs beside %s", len(all), len(base), knownFailing)
	var results []string
	report := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		results = append(results, line)
		t.Log(line)
	}
	survivors := 0
	for i, m := range all {
		if only != nil && !only.MatchString(m.name) {
			continue
		}
		if why, ok := equivalentTo(m.name); ok {
			report("EQUIV    %s: %s", m.name, why)
			continue
		}
		overlay, err := writeOverlay(dir, i, filepath.Join(root, m.file), m.src)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = run(root, nil, 10*time.Minute, "go", "build", "-overlay", overlay, "./backend/machine/")
		if err != nil {
			report("INVALID  %s (does not build)", m.name)
			continue
		}
		if !modelOnly {
			out, err = run(root, nil, 10*time.Minute, "go", append(tableArgs, "-overlay", overlay, "./backend/machine/")...)
			if err != nil {
				report("TABLE    %s: %s (%v)", m.name, firstFailure(out), time.Since(start).Round(time.Second))
				continue
			}
		}
		out, err = modelCheck(root, overlay, seeds)
		var fresh []string
		for k := range failures(out) {
			if !base[k] {
				fresh = append(fresh, k)
			}
		}
		slices.Sort(fresh)
		switch {
		case len(fresh) > 0:
			report("MODEL    %s: %s (%v)", m.name, summarize(fresh), time.Since(start).Round(time.Second))
		case err != nil && !bytes.Contains(out, []byte("--- FAIL: TestModelCheck/seed=")):
			report("MODEL    %s: the check stopped: %s (%v)", m.name, firstFailure(out), time.Since(start).Round(time.Second))
		default:
			survivors++
			report("SURVIVED %s (%v)", m.name, time.Since(start).Round(time.Second))
		}
	}
	if path := os.Getenv("ANARCHON_MUTANTS_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(strings.Join(results, "\n")+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	if survivors > 0 {
		t.Errorf("%d mutants survived", survivors)
	}
}

// equivalentTo says why the mutant named name is equivalent, if it is.
func equivalentTo(name string) (string, bool) {
	for suffix, why := range equivalent {
		if strings.HasSuffix(name, suffix) {
			return why, true
		}
	}
	return "", false
}

// mutantsOf lists the mutants of file: each case clause of every switch
// deleted, each condition of an expression switch's case inverted, and each
// if's condition inverted and its body deleted.
func mutantsOf(root, file string) ([]mutant, error) {
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	// Uses of the file's imports keep a mutant that deletes their only use
	// building.
	keep := "\n"
	for _, im := range f.Imports {
		switch strings.Trim(im.Path.Value, `"`) {
		case "fmt":
			keep += "var _ = fmt.Sprint\n"
		case "time":
			keep += "var _ time.Duration\n"
		case "github.com/anarchon/anarchon/backend":
			keep += "var _ backend.Status\n"
		}
	}
	edit := func(from, to int, with string) []byte {
		out := append([]byte(nil), src[:from]...)
		out = append(out, with...)
		out = append(out, src[to:]...)
		return append(out, keep...)
	}
	var out []mutant
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if is, ok := n.(*ast.IfStmt); ok {
				// An arrow written as an if: its condition inverted, its body
				// deleted.
				line := fset.Position(is.Pos()).Line
				cond := strings.Join(strings.Fields(string(src[off(is.Cond.Pos()):off(is.Cond.End())])), " ")
				if len(cond) > 70 {
					cond = cond[:70] + "…"
				}
				name := fmt.Sprintf("%s:%d %s: if %s", filepath.Base(file), line, fn.Name.Name, cond)
				out = append(out,
					mutant{name: name + " — inverted", file: file, src: edit(off(is.Cond.Pos()), off(is.Cond.End()), "!("+string(src[off(is.Cond.Pos()):off(is.Cond.End())])+")")},
					mutant{name: name + " — body deleted", file: file, src: edit(off(is.Body.Lbrace)+1, off(is.Body.Rbrace), "")})
				return true
			}
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			for _, s := range sw.Body.List {
				cc := s.(*ast.CaseClause)
				line := fset.Position(cc.Pos()).Line
				what := "default"
				if len(cc.List) > 0 {
					what = "case " + string(src[off(cc.List[0].Pos()):off(cc.List[len(cc.List)-1].End())])
				}
				what = strings.Join(strings.Fields(what), " ")
				if len(what) > 70 {
					what = what[:70] + "…"
				}
				name := fmt.Sprintf("%s:%d %s: %s", filepath.Base(file), line, fn.Name.Name, what)
				out = append(out, mutant{name: name + " — deleted", file: file, src: edit(off(cc.Pos()), off(cc.End()), "")})
				if sw.Tag != nil {
					continue
				}
				for i, e := range cc.List {
					txt := string(src[off(e.Pos()):off(e.End())])
					label := " — inverted"
					if len(cc.List) > 1 {
						label = fmt.Sprintf(" — condition %d inverted", i+1)
					}
					out = append(out, mutant{name: name + label, file: file, src: edit(off(e.Pos()), off(e.End()), "!("+txt+")")})
				}
			}
			return true
		})
	}
	return out, nil
}

// writeOverlay writes the mutant's text and an overlay (go help build) that
// builds it in place of path.
func writeOverlay(dir string, i int, path string, src []byte) (string, error) {
	file := filepath.Join(dir, fmt.Sprintf("mutant%d.go", i))
	if err := os.WriteFile(file, src, 0o644); err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]map[string]string{"Replace": {path: file}})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, fmt.Sprintf("overlay%d.json", i))
	return overlay, os.WriteFile(overlay, b, 0o644)
}

// modelCheck runs the scheduler's model check on seeds seeds, with the mutant
// of overlay ("" for none).
func modelCheck(root, overlay string, seeds int) ([]byte, error) {
	args := []string{"test", "-count=1", "-timeout", "20m", "-run", "TestModelCheck$"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	env := []string{"ANARCHON_MODEL_SEEDS=" + strconv.Itoa(seeds), "ANARCHON_MODEL_SKIP=" + knownFailing}
	return run(root, env, 25*time.Minute, "go", append(args, "./scheduler/")...)
}

func run(dir string, env []string, limit time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

var (
	seedLine = regexp.MustCompile(`--- FAIL: TestModelCheck/seed=(\d+)`)
	invLine  = regexp.MustCompile(`^\s+\[([0-9a-z-]+)\] `)
)

// failures are the (seed, invariant) pairs a model check's output reports.
func failures(out []byte) map[string]bool {
	got := map[string]bool{}
	seed := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if m := seedLine.FindStringSubmatch(line); m != nil {
			seed = m[1]
			continue
		}
		if m := invLine.FindStringSubmatch(line); m != nil && seed != "" {
			got[m[1]+" seed "+seed] = true
		}
	}
	return got
}

// topFailures are the top-level tests out reports failed.
func topFailures(out []byte) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^--- FAIL: (Test\w+)`).FindAllSubmatch(out, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// summarize names the invariants of pairs, with how many seeds each.
func summarize(pairs []string) string {
	count := map[string]int{}
	var names []string
	for _, p := range pairs {
		inv, _, _ := strings.Cut(p, " seed ")
		if count[inv] == 0 {
			names = append(names, inv)
		}
		count[inv]++
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = fmt.Sprintf("%s (%d seeds)", n, count[n])
	}
	return strings.Join(names, ", ")
}

// firstFailure is the first line of out that names a failed test or a panic.
func firstFailure(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "--- FAIL") || strings.HasPrefix(line, "panic:") {
			return strings.TrimSpace(line)
		}
	}
	return "failed"
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
