package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// run runs c with a background context and fails t on an error.
func run(t *testing.T, c *Cmd) *Result {
	t.Helper()
	res, err := c.Run(context.Background())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Stages) != len(c.Argv) {
		t.Fatalf("%d stage results for %d stages", len(res.Stages), len(c.Argv))
	}
	return res
}

// checkStage fails t unless stage i ended with code and signal sig.
func checkStage(t *testing.T, res *Result, i, code int, sig string) {
	t.Helper()
	st := res.Stages[i]
	if st.ExitCode != code || st.Signal != sig {
		t.Errorf("stage %d: exit %d signal %q, want exit %d signal %q (stderr %q)", i, st.ExitCode, st.Signal, code, sig, st.Stderr.Bytes())
	}
}

func TestRunOneStage(t *testing.T) {
	t.Parallel()
	res := run(t, helperCmd([]string{"echo", "hello", "world"}))
	checkStage(t, res, 0, 0, "")
	if got := string(res.Stdout.Bytes()); got != "hello world\n" || res.Stdout.Total != 12 || res.Stdout.Truncated {
		t.Errorf("stdout = %+v", res.Stdout)
	}
	if res.TimedOut || res.Canceled {
		t.Errorf("TimedOut %v Canceled %v", res.TimedOut, res.Canceled)
	}
	if res.Stages[0].Duration <= 0 {
		t.Errorf("Duration = %v", res.Stages[0].Duration)
	}
}

func TestRunTwoStages(t *testing.T) {
	t.Parallel()
	res := run(t, helperCmd([]string{"echo", "through a pipe"}, []string{"catexit", "3", "oops"}))
	checkStage(t, res, 0, 0, "")
	checkStage(t, res, 1, 3, "")
	if got := string(res.Stdout.Bytes()); got != "through a pipe\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := string(res.Stages[1].Stderr.Bytes()); got != "oops" {
		t.Errorf("stage 1 stderr = %q", got)
	}
	if res.Stages[0].Stderr.Total != 0 {
		t.Errorf("stage 0 stderr = %q", res.Stages[0].Stderr.Bytes())
	}
}

func TestRunFiveStages(t *testing.T) {
	t.Parallel()
	stages := [][]string{{"echo", "five"}}
	for i := 1; i < 5; i++ {
		stages = append(stages, []string{"catexit", fmt.Sprint(i + 10), fmt.Sprintf("stage %d says", i)})
	}
	res := run(t, helperCmd(stages...))
	checkStage(t, res, 0, 0, "")
	for i := 1; i < 5; i++ {
		checkStage(t, res, i, i+10, "")
		if got, want := string(res.Stages[i].Stderr.Bytes()), fmt.Sprintf("stage %d says", i); got != want {
			t.Errorf("stage %d stderr = %q, want %q", i, got, want)
		}
	}
	if got := string(res.Stdout.Bytes()); got != "five\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestRunQuickStages(t *testing.T) {
	t.Parallel()
	// Stages that exit while others are still starting: each one's
	// output and status must still be its own.
	const runs, stages = 30, 8
	for n := range runs {
		var argv [][]string
		for i := range stages {
			argv = append(argv, []string{"exit", fmt.Sprint(i), fmt.Sprintf("run %d stage %d", n, i)})
		}
		res := run(t, helperCmd(argv...))
		for i := range stages {
			checkStage(t, res, i, i, "")
			if got, want := string(res.Stages[i].Stderr.Bytes()), fmt.Sprintf("run %d stage %d", n, i); got != want {
				t.Errorf("run %d stage %d: stderr %q, want %q", n, i, got, want)
			}
		}
	}
}

// checkCapture fails t unless c holds the first limit of total pattern
// bytes, in chunks that were never outgrown: each full but the last, none
// past captureChunk, and no more room allocated than the limit.
func checkCapture(t *testing.T, what string, c Capture, total, limit int) {
	t.Helper()
	keep := min(total, limit)
	if c.Total != int64(total) || c.Truncated != (total > limit) || c.Len() != keep {
		t.Errorf("%s: Total %d Truncated %v Len %d; want %d %v %d", what, c.Total, c.Truncated, c.Len(), total, total > limit, keep)
	}
	room, held := 0, 0
	chunks := c.Chunks()
	for i, ch := range chunks {
		room += cap(ch)
		held += len(ch)
		if i < len(chunks)-1 && len(ch) != cap(ch) {
			t.Errorf("%s: chunk %d of %d holds %d bytes of %d: not full", what, i, len(chunks), len(ch), cap(ch))
		}
		if cap(ch) > captureChunk || cap(ch) == 0 {
			t.Errorf("%s: chunk %d has room for %d bytes", what, i, cap(ch))
		}
	}
	if held != c.Len() {
		t.Errorf("%s: chunks hold %d bytes, Len %d", what, held, c.Len())
	}
	if room > limit {
		t.Errorf("%s: chunks have room for %d bytes > limit %d", what, room, limit)
	}
	want := pattern(keep)
	if !bytes.Equal(c.Bytes(), want) {
		t.Errorf("%s: Bytes is not the first %d bytes written", what, keep)
	}
	var w bytes.Buffer
	if n, err := c.WriteTo(&w); err != nil || n != int64(keep) || !bytes.Equal(w.Bytes(), want) {
		t.Errorf("%s: WriteTo wrote %d bytes (%v), not the first %d bytes written", what, n, err, keep)
	}
}

func TestRunLargeStdout(t *testing.T) {
	t.Parallel()
	const n = 100 << 20
	res := run(t, helperCmd([]string{"write", "1", fmt.Sprint(n)}))
	checkStage(t, res, 0, 0, "")
	checkCapture(t, "stdout", res.Stdout, n, DefaultCap)
}

func TestRunLargeMiddleStderr(t *testing.T) {
	t.Parallel()
	const n, out = 100 << 20, 1 << 20
	res := run(t, helperCmd(
		[]string{"write", "1", fmt.Sprint(out)},
		[]string{"pass-stderr", fmt.Sprint(n)},
		[]string{"catexit", "0", ""},
	))
	for i := range 3 {
		checkStage(t, res, i, 0, "")
	}
	checkCapture(t, "stage 1 stderr", res.Stages[1].Stderr, n, DefaultCap)
	checkCapture(t, "stdout", res.Stdout, out, DefaultCap)
}

func TestRunCap(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 9, 10, 11, 100000} {
		c := helperCmd([]string{"write", "1", fmt.Sprint(n)}, []string{"pass-stderr", fmt.Sprint(n)})
		c.Cap = 10
		res := run(t, c)
		checkCapture(t, fmt.Sprintf("stdout of %d", n), res.Stdout, n, 10)
		checkCapture(t, fmt.Sprintf("stderr of %d", n), res.Stages[1].Stderr, n, 10)
	}
}

// TestRunStderrShareCap: the stages' stderr captures share one Cap. Two
// stages writing more than the Cap to stderr at once keep, together,
// exactly the Cap (the chunks are charged to it whole and each stage,
// having more to write, fills every chunk it took), each keeps a prefix
// of what it wrote, both are marked truncated, and what the captures
// allocated is the Cap and no more. Stdout keeps a Cap of its own.
func TestRunStderrShareCap(t *testing.T) {
	t.Parallel()
	const limit, size = 3<<20 + 5, 4 << 20
	c := helperCmd([]string{"write", "2", fmt.Sprint(size)}, []string{"pass-stderr", fmt.Sprint(size)}, []string{"write", "1", fmt.Sprint(size)})
	c.Cap = limit
	res := run(t, c)
	kept, room := 0, 0
	for i, st := range res.Stages[:2] {
		e := st.Stderr
		kept += e.Len()
		for _, ch := range e.Chunks() {
			room += cap(ch)
		}
		if e.Total != size || !e.Truncated {
			t.Errorf("stage %d: stderr Total %d Truncated %v; want %d true", i+1, e.Total, e.Truncated, size)
		}
		if !bytes.Equal(e.Bytes(), pattern(e.Len())) {
			t.Errorf("stage %d: the %d bytes of stderr kept are not the first written", i+1, e.Len())
		}
		t.Logf("stage %d kept %d bytes of stderr", i+1, e.Len())
	}
	if kept != limit || room != limit {
		t.Errorf("the stderr captures kept %d bytes in chunks with room for %d; want both %d, the Cap they share", kept, room, limit)
	}
	checkCapture(t, "stdout", res.Stdout, size, limit)
}

// TestCaptureWrite: bytes recorded by write (the end of a stream taken
// after its deadline), in writes of odd sizes that straddle the chunks'
// ends, are kept as written up to the limit.
func TestCaptureWrite(t *testing.T) {
	for _, tc := range []struct{ total, step, limit int }{
		{1000, 7, 500},
		{3 << 20, 4099, 2<<20 + 1},
		{3 << 20, 65537, 2 << 20},
		{1 << 20, 1, 1<<20 - 1},
	} {
		var c Capture
		b := newBudget(tc.limit)
		p := pattern(tc.total)
		for i := 0; i < len(p); i += tc.step {
			c.write(p[i:min(i+tc.step, len(p))], b)
		}
		checkCapture(t, fmt.Sprintf("%d bytes in writes of %d at limit %d", tc.total, tc.step, tc.limit), c, tc.total, tc.limit)
	}
}

// newBudget returns a budget of n bytes.
func newBudget(n int) *budget {
	b := new(budget)
	b.left.Store(int64(n))
	return b
}

// chunkEnds returns where the chunks of a capture at limit end, as
// offsets in the stream: the sizes a stream straddles a chunk's end at.
func chunkEnds(limit int) []int {
	var ends []int
	end, size := 0, captureStart
	for end < limit {
		end = min(end+size, limit)
		ends = append(ends, end)
		size = min(captureGrow*size, captureChunk)
	}
	return ends
}

// TestCaptureSizes: streams of every size around a chunk's end (the first
// chunks, two whole captureChunk ones, and the cap) come back exactly as
// the stage wrote them, on stdout and on stderr, with Truncated and Total
// right.
func TestCaptureSizes(t *testing.T) {
	t.Parallel()
	ends := chunkEnds(DefaultCap)
	if len(ends) < 7 || ends[4] != 340<<10+captureChunk {
		t.Fatalf("chunk ends %v: not the sizes this test means", ends)
	}
	sizes := []int{0, 1, 2}
	for _, end := range append(ends[:7:7], DefaultCap) {
		sizes = append(sizes, end-1, end, end+1)
	}
	for _, n := range sizes {
		res := run(t, helperCmd([]string{"write", "1", fmt.Sprint(n)}, []string{"pass-stderr", fmt.Sprint(n)}))
		checkCapture(t, fmt.Sprintf("stdout of %d", n), res.Stdout, n, DefaultCap)
		checkCapture(t, fmt.Sprintf("stderr of %d", n), res.Stages[1].Stderr, n, DefaultCap)
	}
}

// TestCaptureOddWrites: a stream written in writes of odd sizes, which
// the pipe hands over in reads that straddle the chunks' ends, is kept as
// written, at the cap and under it; and reaches StdoutTo as written.
func TestCaptureOddWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ total, step int }{
		{DefaultCap + 12345, 4099},
		{3<<20 + 7, 65539},
		{30011, 1},
	} {
		what := fmt.Sprintf("%d bytes in writes of %d", tc.total, tc.step)
		write := []string{"write", "1", fmt.Sprint(tc.total), fmt.Sprint(tc.step)}
		res := run(t, helperCmd(write))
		checkCapture(t, what, res.Stdout, tc.total, DefaultCap)
		w := &collector{}
		c := helperCmd(write)
		c.StdoutTo = w
		res = run(t, c)
		checkStreamed(t, what+", streamed", res.Stdout, w, tc.total, DefaultCap)
	}
}

func TestRunBinary(t *testing.T) {
	t.Parallel()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	res := run(t, helperCmd([]string{"allbytes"}, []string{"catexit", "0", ""}))
	if !bytes.Equal(res.Stdout.Bytes(), all) {
		t.Errorf("allbytes through a stage: stdout = %q", res.Stdout.Bytes())
	}

	in := bytes.Repeat(all, 1000)
	c := helperCmd([]string{"catexit", "0", ""}, []string{"catexit", "0", ""})
	c.Stdin = in
	res = run(t, c)
	if !bytes.Equal(res.Stdout.Bytes(), in) {
		t.Errorf("stdin through two stages: got %d bytes back, want %d equal ones", len(res.Stdout.Bytes()), len(in))
	}
}

func TestRunStdin(t *testing.T) {
	t.Parallel()
	c := helperCmd([]string{"catexit", "0", ""})
	c.Stdin = []byte("to the first stage\n")
	res := run(t, c)
	if got := string(res.Stdout.Bytes()); got != "to the first stage\n" {
		t.Errorf("stdout = %q", got)
	}

	// Nil stdin is /dev/null: immediate EOF.
	res = run(t, helperCmd([]string{"catexit", "0", ""}))
	if res.Stdout.Total != 0 || res.Stages[0].ExitCode != 0 {
		t.Errorf("nil stdin: stdout %q exit %d", res.Stdout.Bytes(), res.Stages[0].ExitCode)
	}

	// A stage that stops reading: the rest of stdin is dropped, no hang.
	c = helperCmd([]string{"head", "5"})
	c.Stdin = bytes.Repeat([]byte("abcdefgh"), 1<<20)
	res = run(t, c)
	if got := string(res.Stdout.Bytes()); got != "abcde" || res.Stages[0].ExitCode != 0 {
		t.Errorf("head 5: stdout %q exit %d", got, res.Stages[0].ExitCode)
	}
}

func TestRunYesHead(t *testing.T) {
	t.Parallel()
	yes, err := Resolve("yes", "/")
	if err != nil {
		t.Skip(err)
	}
	head, err := Resolve("head", "/")
	if err != nil {
		t.Skip(err)
	}
	res := run(t, &Cmd{
		Argv:  [][]string{{"yes"}, {"head", "-n", "1"}},
		Paths: []string{yes.Path, head.Path},
		Env:   []string{"PATH=" + SearchPath},
	})
	checkStage(t, res, 0, 128+int(syscall.SIGPIPE), "SIGPIPE")
	checkStage(t, res, 1, 0, "")
	if got := string(res.Stdout.Bytes()); got != "y\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestRunSignalDeath(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		name := signalName(sig)
		res := run(t, helperCmd([]string{"raise", name}, []string{"catexit", "0", ""}))
		checkStage(t, res, 0, 128+int(sig), name)
		checkStage(t, res, 1, 0, "")
	}
}

func TestRunDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ dir, want string }{{dir, dir}, {"", "/"}} {
		c := helperCmd([]string{"id"})
		c.Dir = tc.dir
		res := run(t, c)
		if !strings.Contains(string(res.Stdout.Bytes()), "\ncwd="+tc.want+"\n") {
			t.Errorf("Dir %q: child reports %q", tc.dir, res.Stdout.Bytes())
		}
	}
}

func TestRunEnv(t *testing.T) {
	t.Parallel()
	// Nil is empty, not the test process's environment.
	for _, env := range [][]string{nil, {"A=1", "B=two words"}} {
		c := helperCmd([]string{"id"})
		c.Env = env
		res := run(t, c)
		var got []string
		tags := 0
		for l := range strings.Lines(string(res.Stdout.Bytes())) {
			if e, ok := strings.CutPrefix(l, "env "); ok {
				e = strings.TrimSuffix(e, "\n")
				if v, ok := strings.CutPrefix(e, RunEnvKey+"="); ok && len(v) == 32 {
					tags++
					continue
				}
				got = append(got, e)
			}
		}
		if len(got) != len(env) || !slices.Equal(got, env) || tags != 1 {
			t.Errorf("Env %q: child sees %q and %d run tags", env, got, tags)
		}
	}
}

func TestRunFDs(t *testing.T) {
	t.Parallel()
	// A descriptor of the test process without close-on-exec, as one
	// inherited from a careless parent would be: Run must not pass it on.
	leaky, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leaky)
	for _, stdin := range [][]byte{nil, []byte("x")} {
		c := helperCmd([]string{"fds"}, []string{"fds"}, []string{"fds"})
		c.Stdin = stdin
		res := run(t, c)
		for i, st := range res.Stages {
			checkStage(t, res, i, 0, "")
			if got := string(st.Stderr.Bytes()); got != "0 1 2\n" {
				t.Errorf("stdin %q: stage %d has descriptors %q, want 0 1 2", stdin, i, got)
			}
		}
	}
}

func TestRunAccount(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	acct, err := LookupAccount(65534)
	if err != nil {
		t.Skip(err)
	}
	// The test binary sits in a private build directory; give nobody a
	// copy it can execute.
	dir, err := os.MkdirTemp("", "rootgate-pipeline-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "helper")
	copyFile(t, testExe, exe, 0o755)

	env := Env(acct, map[string]string{"LANG": "C"})
	c := helperCmd([]string{"id"})
	c.Paths[0] = exe
	c.Env = env
	c.Account = &acct
	res := run(t, c)
	checkStage(t, res, 0, 0, "")

	groups := slices.Clone(acct.Groups)
	slices.Sort(groups)
	var want strings.Builder
	fmt.Fprintf(&want, "uid=%d gid=%d groups=%v\ncwd=/\n", acct.UID, acct.GID, groups)
	for _, e := range env {
		fmt.Fprintf(&want, "env %s\n", e)
	}
	if got := untagged(res.Stdout.Bytes()); got != want.String() {
		t.Errorf("child reports\n%s\nwant\n%s", got, want.String())
	}

	// No supplementary groups at all: root's are cleared, not kept.
	acct.Groups = nil
	c = helperCmd([]string{"id"})
	c.Paths[0] = exe
	c.Account = &acct
	res = run(t, c)
	if got, want := strings.SplitN(untagged(res.Stdout.Bytes()), "\n", 2)[0], "uid=65534 gid=65534 groups=[]"; got != want {
		t.Errorf("with no groups the child reports %q, want %q", got, want)
	}
}

// copyFile copies from to a new file to with mode, through cp(1): the
// copy's write descriptor lives in cp alone, never in this process, whose
// other tests' children (between their fork and exec) would hold it open
// too and make exec of the copy fail with ETXTBSY.
func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	if _, err := os.Lstat(to); err == nil {
		t.Fatalf("copy to %s: it exists", to)
	}
	if out, err := exec.Command("cp", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v\n%s", from, to, err, out)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}

// killTest is a run that only a kill ends.
type killTest struct {
	name   string
	stages [][]string // helper and arguments; "M" becomes the marker, "R" the stage's ready file
	// per stage: the signal expected to have killed it
	signals []string
}

var killTests = []killTest{
	{"ignores SIGTERM", [][]string{{"ignore-term", "M", "R"}}, []string{"SIGKILL"}},
	{"grandchild holds the pipes", [][]string{{"spawn", "wait", "M", "R"}}, []string{"SIGKILL"}},
	{"closes stdout and sleeps", [][]string{{"close-out", "M", "R"}}, []string{"SIGTERM"}},
	{"sleeps past the limit", [][]string{{"sleep", "M", "R"}}, []string{"SIGTERM"}},
	{"every stage", [][]string{
		{"sleep", "M", "R"},
		{"spawn", "wait", "M", "R"},
		{"ignore-term", "M", "R"},
		{"close-out", "M", "R"},
	}, []string{"SIGTERM", "SIGKILL", "SIGKILL", "SIGTERM"}},
}

// killCmd builds kt's Cmd for the test t and returns it with its marker
// and the stages' ready files.
func killCmd(t *testing.T, kt killTest) (c *Cmd, m string, readyFiles []string) {
	m = marker(t)
	killMarked(t, m)
	dir := t.TempDir()
	var stages [][]string
	for i, s := range kt.stages {
		s = slices.Clone(s)
		for j, a := range s {
			switch a {
			case "M":
				s[j] = m
			case "R":
				s[j] = filepath.Join(dir, fmt.Sprintf("ready%d", i))
				readyFiles = append(readyFiles, s[j])
			}
		}
		stages = append(stages, s)
	}
	return helperCmd(stages...), m, readyFiles
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	for _, kt := range killTests {
		t.Run(kt.name, func(t *testing.T) {
			t.Parallel()
			c, m, readyFiles := killCmd(t, kt)
			// Long enough for the helpers to set themselves up (checked
			// below through the ready files) and, for those that obey
			// SIGTERM, to die of it, even on a busy machine.
			c.Timeout = 2 * time.Second
			c.KillGrace = time.Second
			start := time.Now()
			res := run(t, c)
			elapsed := time.Since(start)
			for _, f := range readyFiles {
				if _, err := os.Stat(f); err != nil {
					t.Fatalf("a helper was not set up before the timeout: %v", err)
				}
			}
			if !res.TimedOut || res.Canceled {
				t.Errorf("TimedOut %v Canceled %v, want true false", res.TimedOut, res.Canceled)
			}
			for i, sig := range kt.signals {
				checkStage(t, res, i, 128+int(unixSignal(sig)), sig)
				if d := res.Stages[i].Duration; d < c.Timeout {
					t.Errorf("stage %d Duration %v shorter than the timeout", i, d)
				}
			}
			// Not a performance bound: a hang would take forever.
			if limit := c.Timeout + c.KillGrace + 10*time.Second; elapsed > limit {
				t.Errorf("Run took %v", elapsed)
			}
			checkNoSurvivors(t, m)
		})
	}
}

func unixSignal(name string) syscall.Signal {
	for s := syscall.Signal(1); s < 65; s++ {
		if signalName(s) == name {
			return s
		}
	}
	panic("no signal " + name)
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	for _, kt := range killTests {
		t.Run(kt.name, func(t *testing.T) {
			t.Parallel()
			c, m, readyFiles := killCmd(t, kt)
			c.KillGrace = time.Second
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				for _, f := range readyFiles {
					<-waitFile(f)
				}
				cancel()
			}()
			res, err := c.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Canceled || res.TimedOut {
				t.Errorf("Canceled %v TimedOut %v, want true false", res.Canceled, res.TimedOut)
			}
			for i, sig := range kt.signals {
				checkStage(t, res, i, 128+int(unixSignal(sig)), sig)
			}
			checkNoSurvivors(t, m)
		})
	}
}

func TestRunBackgroundKilled(t *testing.T) {
	t.Parallel()
	// The stage exits at once, leaving a grandchild that ignores SIGTERM
	// and holds stdout and stderr: it is killed and the output ends.
	m := marker(t)
	killMarked(t, m)
	res := run(t, helperCmd([]string{"spawn", "exit", m, "-"}, []string{"catexit", "0", ""}))
	checkStage(t, res, 0, 0, "")
	checkStage(t, res, 1, 0, "")
	if got := string(res.Stdout.Bytes()); got != "hi\n" {
		t.Errorf("stdout = %q", got)
	}
	if res.TimedOut || res.Canceled {
		t.Errorf("TimedOut %v Canceled %v", res.TimedOut, res.Canceled)
	}
	checkNoSurvivors(t, m)
}

func TestRunEscapee(t *testing.T) {
	t.Parallel()
	// A grandchild in a session of its own escapes the group kill, but
	// keeps the run's tag in its environment and is killed by the sweep;
	// it cannot keep Run from returning by holding stdout meanwhile.
	m := marker(t)
	killMarked(t, m)
	res := run(t, helperCmd([]string{"spawn", "escape", m, "-"}))
	checkStage(t, res, 0, 0, "")
	if got := string(res.Stdout.Bytes()); got != "hi\n" {
		t.Errorf("stdout = %q", got)
	}
	if !waitFor(10*time.Second, func() bool { return len(markedProcesses(m)) == 0 }) {
		t.Errorf("the escaped grandchild survived the run: %v", markedProcesses(m))
	}
}

func TestRunStartError(t *testing.T) {
	t.Parallel()
	m := marker(t)
	killMarked(t, m)
	plain := filepath.Join(t.TempDir(), "plain")
	mkfile(t, plain, 0o644)
	c := helperCmd([]string{"sleep", m, "-"}, []string{"echo"}, []string{"ignore-term", m, "-"})
	c.Paths[1] = plain
	res, err := c.Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "run: stage 2: ") || !errors.Is(err, os.ErrPermission) {
		t.Errorf("Run = %v, %v; want a stage 2 permission error", res, err)
	}
	checkNoSurvivors(t, m)
}

func TestRunInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cmd  Cmd
		want string
	}{
		{"no stages", Cmd{}, "run: no stages"},
		{"paths", Cmd{Argv: [][]string{{"a"}}}, "run: 0 paths for 1 stages"},
		{"empty argv", Cmd{Argv: [][]string{{"a"}, {}}, Paths: []string{"/a", "/b"}}, "run: stage 2: empty argv"},
		{"relative path", Cmd{Argv: [][]string{{"a"}}, Paths: []string{"a"}}, `run: stage 1: path "a" is not absolute`},
		{"relative dir", Cmd{Argv: [][]string{{"a"}}, Paths: []string{"/a"}, Dir: "tmp"}, `run: dir "tmp" is not absolute`},
		{"negative", Cmd{Argv: [][]string{{"a"}}, Paths: []string{"/a"}, Timeout: -1}, "run: negative Timeout, KillGrace or Cap"},
	} {
		if _, err := tc.cmd.Run(context.Background()); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Run error = %v, want %q", tc.name, err, tc.want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := helperCmd([]string{"echo"}).Run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with an ended context: err = %v", err)
	}

	c := helperCmd([]string{"echo"})
	run(t, c)
	if _, err := c.Run(context.Background()); err == nil {
		t.Error("second Run of a Cmd succeeded")
	}
}

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestNoLeaks runs alone (not in parallel) so the counts are its own.
func TestNoLeaks(t *testing.T) {
	m := marker(t)
	killMarked(t, m)
	killMarked(t, m+"-escapee")
	plain := filepath.Join(t.TempDir(), "plain")
	mkfile(t, plain, 0o644)
	// The first run in the process may make the runtime open descriptors
	// of its own (the poller's); they stay.
	run(t, helperCmd([]string{"echo"}))
	for _, tc := range []struct {
		name   string
		cmd    func() *Cmd
		cancel bool
	}{
		{"normal", func() *Cmd {
			c := helperCmd([]string{"write", "1", "100000"}, []string{"pass-stderr", "100000"}, []string{"catexit", "0", ""})
			c.Stdin = []byte("in")
			return c
		}, false},
		{"stdin not read", func() *Cmd {
			c := helperCmd([]string{"head", "1"})
			c.Stdin = make([]byte, 1<<20)
			return c
		}, false},
		{"timeout", func() *Cmd {
			c := helperCmd([]string{"spawn", "wait", m, "-"}, []string{"ignore-term", m, "-"})
			c.Timeout = 100 * time.Millisecond
			c.KillGrace = 100 * time.Millisecond
			return c
		}, false},
		{"cancel", func() *Cmd {
			c := helperCmd([]string{"sleep", m, "-"})
			c.KillGrace = 100 * time.Millisecond
			return c
		}, true},
		{"background", func() *Cmd { return helperCmd([]string{"spawn", "exit", m, "-"}) }, false},
		{"escapee", func() *Cmd { return helperCmd([]string{"spawn", "escape", m + "-escapee", "-"}) }, false},
		{"start error", func() *Cmd {
			c := helperCmd([]string{"sleep", m, "-"}, []string{"echo"})
			c.Paths[1] = plain
			return c
		}, false},
	} {
		goroutines, fds := runtime.NumGoroutine(), openFDs(t)
		ctx, cancel := context.WithCancel(context.Background())
		if tc.cancel {
			ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		}
		_, err := tc.cmd().Run(ctx)
		cancel()
		if err != nil && tc.name != "start error" {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !waitFor(5*time.Second, func() bool { return runtime.NumGoroutine() <= goroutines }) {
			buf := make([]byte, 1<<20)
			t.Errorf("%s: %d goroutines before, %d after:\n%s", tc.name, goroutines, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		if got := openFDs(t); got != fds {
			t.Errorf("%s: %d descriptors open before, %d after", tc.name, fds, got)
		}
	}
	checkNoSurvivors(t, m)
}

// untagged is a helper's "id" report without the run tag's env line.
func untagged(out []byte) string {
	return regexp.MustCompile(`(?m)^env `+RunEnvKey+`=[0-9a-f]{32}\n`).ReplaceAllString(string(out), "")
}

func TestRunReapsOrphans(t *testing.T) {
	t.Parallel()
	// A double fork into a session of its own, which ends by itself while
	// the run goes on: it is handed to this process (a subreaper, as
	// rootgated is), and the end of the run must reap it, not leave a
	// zombie behind.
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `(setsid sh -c 'echo $$ > "$1"; exit 0' sh "$1" &); while [ ! -s "$1" ]; do sleep 0.01; done; sleep 0.2`
	res := run(t, &Cmd{Argv: [][]string{{"sh", "-c", script, "sh", pidFile}}, Paths: []string{"/bin/sh"}})
	checkStage(t, res, 0, 0, "")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	if st, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil {
		t.Errorf("the orphan %s is still there after the run: %s", pid, st)
	}
}

func TestRunEntersHeldDir(t *testing.T) {
	t.Parallel()
	// The directory is held open when the run is planned; replacing it at
	// its path afterwards (here with a symlink to another directory) must
	// not change where the run starts, as root or as nobody.
	base, err := os.MkdirTemp("", "rootgate-dir-") // nobody must enter it
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	shown := filepath.Join(base, "work")
	for _, d := range []string{shown, filepath.Join(base, "elsewhere")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "where"), []byte(filepath.Base(d)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, acct := range []*Account{nil, {UID: 65534, GID: 65534}} {
		dir, err := OpenDir(shown)
		if err != nil {
			t.Fatal(err)
		}
		moved := filepath.Join(base, "moved")
		if err := os.Rename(shown, moved); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(base, "elsewhere"), shown); err != nil {
			t.Fatal(err)
		}
		c := &Cmd{Argv: [][]string{{"cat", "where"}}, Paths: []string{"/bin/cat"}, Dir: shown, DirFile: dir, Account: acct}
		res := run(t, c)
		dir.Close()
		checkStage(t, res, 0, 0, "")
		if got := string(res.Stdout.Bytes()); got != "work\n" {
			t.Errorf("run as %v read %q, want the held directory's file", acct, got)
		}
		// Put the directory back for the next account.
		if err := os.Remove(shown); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(moved, shown); err != nil {
			t.Fatal(err)
		}
	}
}
