// Command bench measures rootgate against the physical limit and against
// what people use instead, and prints one table (docs/performance.md says
// how to read it and holds the latest figures).
//
// It builds rootgated into a temporary directory, starts it as root on
// private sockets under /tmp with an "allow any" policy, and measures, each
// comparison side by side in the same run (interleaved, so that noise from
// other work on the machine falls on both sides alike):
//
//  1. a ["true"] request round trip (connect to answer, client in-process)
//     against spawning /bin/true from Go and against `sudo -n true`, and
//     both under 16 concurrent clients;
//  2. 1 GiB through `head -c 1073741824 /dev/zero | cat | cat | wc -c`
//     through the daemon against the same pipeline under `sh -c`;
//  3. a run writing 1 GiB to stdout and 1 GiB to stderr: time to the
//     answer, the answer's size and the daemon's peak RSS (VmHWM);
//  4. the same ["true"] request asked of an approver client that answers
//     at once, against the policy allowing it;
//  5. start-up under socket activation (systemd-socket-activate): connect
//     to READY=1 and connect to first answer.
//
// Usage (as root, from the repository):
//
//	go run ./cmd/bench [-n 300] [-runs 9] [-size 1073741824] [-figures 1,2,3,4,5]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

func main() {
	if v, ok := os.LookupEnv(floorEnv); ok {
		sock, logPath, _ := strings.Cut(v, ":")
		if err := floorServer(sock, logPath); err != nil {
			fmt.Fprintln(os.Stderr, "bench: floor server:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench: error:", err)
		os.Exit(1)
	}
}

// config is the bench's flags.
type config struct {
	n        int   // rounds of the small-request comparisons
	runs     int   // runs of each big-data figure
	size     int64 // bytes pushed through the pipeline and each capture stream
	startups int   // socket activations measured
	conc     int   // concurrent clients
	figures  string
	against  string // another rootgated binary figure 1 compares with, or ""
	bin      string // the rootgated binary to measure; "" builds this checkout's
}

// flags defines the bench's flags on cfg (docs/performance.md lists them).
func flags(cfg *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&cfg.n, "n", 300, "rounds of each small-request comparison")
	fs.IntVar(&cfg.runs, "runs", 9, "runs of each 1 GiB figure")
	fs.Int64Var(&cfg.size, "size", 1<<30, "bytes through the pipeline and on each captured stream")
	fs.IntVar(&cfg.startups, "startups", 30, "socket activations to time")
	fs.IntVar(&cfg.conc, "clients", 16, "concurrent clients")
	fs.StringVar(&cfg.figures, "figures", "1,2,3,4,5", "which figures to measure, comma-separated")
	fs.StringVar(&cfg.bin, "rootgated", "", "the rootgated `binary` to measure, instead of building this checkout's")
	fs.StringVar(&cfg.against, "against", "", "another rootgated `binary` (an older build) whose [\"true\"] round trip and CPU time figure 1 measures in the same rounds")
	return fs
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg config
	if err := flags(&cfg, stderr).Parse(args); err != nil {
		return err
	}
	if cfg.n < 10 || cfg.runs < 1 || cfg.size < 1 || cfg.startups < 1 || cfg.conc < 1 {
		return errors.New("-n must be at least 10, and -runs, -size, -startups, -clients positive")
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root (rootgated does)")
	}
	b := &bench{cfg: cfg, log: stderr}
	defer b.cleanup()
	if err := b.build(); err != nil {
		return err
	}
	load0 := loadavg()
	start := time.Now()
	steps := []struct {
		figure string
		f      func(context.Context) error
	}{{"1", b.overhead}, {"1", b.concurrent}, {"2", b.pipeline}, {"3", b.capture}, {"4", b.prompt}, {"5", b.startup}}
	var want []string
	for f := range strings.SplitSeq(cfg.figures, ",") {
		f = strings.TrimSpace(f)
		if f < "1" || f > "5" || len(f) != 1 {
			return fmt.Errorf("-figures: %q is not a figure (1 to 5)", f)
		}
		want = append(want, f)
	}
	for _, st := range steps {
		if !slices.Contains(want, st.figure) {
			continue
		}
		if err := st.f(ctx); err != nil {
			return err
		}
	}
	b.print(stdout, start, load0)
	return nil
}

// bench holds what the steps share and the rows they produce.
type bench struct {
	cfg     config
	log     io.Writer
	bin     string   // rootgated
	dirs    []string // to remove at the end
	daemons []*daemon
	rows    []row
	notes   []string
}

// row is one line of the table.
type row struct {
	figure, median, spread, n, compare, target, met string
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

func (b *bench) tempDir() (string, error) {
	// Short: socket paths must fit in sun_path (108 bytes).
	d, err := os.MkdirTemp("/tmp", "rgb")
	if err == nil {
		b.dirs = append(b.dirs, d)
	}
	return d, err
}

func (b *bench) cleanup() {
	for _, d := range b.daemons {
		d.stop()
	}
	for _, d := range b.dirs {
		os.RemoveAll(d)
	}
}

// build compiles rootgated as it ships (no race detector).
func (b *bench) build() error {
	if b.cfg.bin != "" {
		b.bin = b.cfg.bin
		return nil
	}
	d, err := b.tempDir()
	if err != nil {
		return err
	}
	b.bin = filepath.Join(d, "rootgated")
	b.progress("building rootgated")
	cmd := exec.Command("go", "build", "-o", b.bin, "github.com/rootgate/rootgate/cmd/rootgated")
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build rootgated: %w", err)
	}
	return nil
}

// daemon is a rootgated started by the bench.
type daemon struct {
	cmd      *exec.Cmd
	sock     string
	approver string // approver socket, or ""
	log      string // its stderr, a file: a pipe would make the bench copy it
	done     chan struct{}
}

// startAgainst starts the -against rootgated as d runs its runs: in a
// cgroup directory of its own beside d's, or without cgroups when d has
// none. Left to its default, it would find d's directory taken and run
// without cgroups (a start-up warning), setting runs without a cgroup
// of their own against d's, which cost more.
func (b *bench) startAgainst(ctx context.Context, d *daemon) (*daemon, error) {
	log, _ := os.ReadFile(d.log)
	cg := "none"
	if m := cgroupLine.FindSubmatch(log); m != nil {
		cg = string(m[1]) + "-against"
	}
	return b.startDaemonBin(ctx, b.cfg.against, "allow any\n", false, "--cgroup", cg)
}

// cgroupLine finds, in a daemon's log, the cgroup directory its runs go
// under.
var cgroupLine = regexp.MustCompile(`cgroup: (/[^:\s"]+): runs contained`)

// startDaemon starts rootgated with the policy text and more flags, and
// waits until it answers a ping.
func (b *bench) startDaemon(ctx context.Context, policy string, approvers bool, more ...string) (*daemon, error) {
	return b.startDaemonBin(ctx, b.bin, policy, approvers, more...)
}

// startDaemonBin is startDaemon with the rootgated binary bin.
func (b *bench) startDaemonBin(ctx context.Context, bin, policy string, approvers bool, more ...string) (*daemon, error) {
	dir, err := b.tempDir()
	if err != nil {
		return nil, err
	}
	pol := filepath.Join(dir, "policy")
	if err := os.WriteFile(pol, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	d := &daemon{sock: filepath.Join(dir, "s"), done: make(chan struct{})}
	aflag := ""
	if approvers {
		d.approver = filepath.Join(dir, "a")
		aflag = d.approver
	}
	// The audit log is written and synced as in production, in the
	// bench's directory; the prompt limits would refuse the bench's
	// hundreds of prompts a minute.
	d.cmd = exec.Command(bin, "--socket", d.sock, "--approver-socket", aflag,
		"--runtime-dir", filepath.Join(dir, "run"), "--policy", pol,
		"--audit", filepath.Join(dir, "audit.jsonl"), "--prompt-rate", "1000000", "--max-pending", "64")
	d.cmd.Args = append(d.cmd.Args, more...)
	d.log = filepath.Join(dir, "log")
	logf, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the daemon has its own descriptor once started
	d.cmd.Stderr = logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	b.daemons = append(b.daemons, d)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := client.Do(ctx, d.sock, &wire.Outgoing{ID: uuid.NewString(), Time: now(), Action: wire.ActionPing})
		if err == nil && r.Status == wire.StatusOK {
			return d, nil
		}
		select {
		case <-d.done:
			out, _ := os.ReadFile(d.log)
			return nil, fmt.Errorf("rootgated exited at start: %s", out)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("rootgated did not answer within 30s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// peakRSS is the daemon's VmHWM in bytes.
func (d *daemon) peakRSS() (int64, error) {
	return statusFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid), "VmHWM:")
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// request sends a pipeline and requires an ok answer whose last stage
// exited 0; it returns the answer's stdout.
func request(ctx context.Context, sock string, pipeline [][]string) ([]byte, error) {
	r, err := client.Do(ctx, sock, &wire.Outgoing{ID: uuid.NewString(), Time: now(), Pipeline: pipeline})
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusOK {
		return nil, fmt.Errorf("%s: %s", r.Status, r.Message)
	}
	if c := r.Stages[len(r.Stages)-1].ExitCode; c != 0 {
		return nil, fmt.Errorf("last stage exited %d: %s", c, r.Stages[len(r.Stages)-1].Stderr)
	}
	return r.Stdout, nil
}

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	t := time.Now()
	err := f()
	return time.Since(t), err
}

// contender is one side of a comparison.
type contender struct {
	name string
	f    func() error
}

// inTurns runs each contender once per round, for warm+n rounds, each
// round starting with the next contender so that none always goes first
// (or always follows the same one). It returns the times of the last n
// rounds, one sample per contender, in contender order.
func inTurns(ctx context.Context, n, warm int, cs ...contender) ([]sample, error) {
	out := make([]sample, len(cs))
	for i := range warm + n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for j := range cs {
			k := (i + j) % len(cs)
			t, err := timed(cs[k].f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cs[k].name, err)
			}
			if i >= warm {
				out[k] = append(out[k], t)
			}
		}
	}
	return out, nil
}

// sample is a set of measurements of one figure.
type sample []time.Duration

func (s sample) q(p float64) time.Duration {
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(p*float64(len(c)-1) + 0.5)
	return c[i]
}

func (s sample) median() time.Duration { return s.q(0.5) }

// spread is the interquartile range, as "p25–p75".
func (s sample) spread() string {
	return fmt.Sprintf("%s–%s", ms(s.q(0.25)), ms(s.q(0.75)))
}

func ms(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// pairedRatio is the median of a[i]/b[i]: a and b were measured in turns,
// so each pair shares the machine's load of its moment, which a ratio of
// the two medians would not.
func pairedRatio(a, b sample) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = ratio(a[i], b[i])
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// pairedDiff is the median of a[i]-b[i].
func pairedDiff(a, b sample) time.Duration {
	d := make(sample, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d.median()
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// overhead is figure 1: a ["true"] round trip against /bin/true spawned
// from Go and against sudo -n true, interleaved round by round.
func (b *bench) overhead(ctx context.Context) error {
	d, err := b.startDaemon(ctx, "allow any\n", false)
	if err != nil {
		return err
	}
	// Stopped once its figure is measured: it holds the default cgroup
	// directory, which the next figure's daemon would otherwise find
	// taken, and run without cgroups.
	defer d.stop()
	sudo, sudoErr := exec.LookPath("sudo")
	if sudoErr != nil {
		b.notes = append(b.notes, "sudo is not installed (apt-get install sudo): the sudo comparison was skipped")
	}
	tru := [][]string{{"true"}}
	viaDaemon := func() error { _, err := request(ctx, d.sock, tru); return err }
	direct := func() error { return exec.Command("/bin/true").Run() }
	viaSudo := func() error {
		out, err := exec.Command(sudo, "-n", "true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("sudo -n true: %v: %s", err, out)
		}
		return nil
	}
	ping := func() error {
		r, err := client.Do(ctx, d.sock, &wire.Outgoing{ID: uuid.NewString(), Time: now(), Action: wire.ActionPing})
		if err == nil && r.Status != wire.StatusOK {
			err = fmt.Errorf("%s: %s", r.Status, r.Message)
		}
		return err
	}
	b.progress("figure 1: %d rounds of daemon / direct spawn / sudo / ping", b.cfg.n)
	floor, err := b.startFloor()
	if err != nil {
		return err
	}
	viaFloor := func() error { _, err := request(ctx, floor.sock, tru); return err }
	cs := []contender{{"daemon round trip", viaDaemon}, {"direct spawn", direct}, {"ping", ping}, {"floor server", viaFloor}}
	if sudoErr == nil {
		cs = append(cs, contender{"sudo", viaSudo})
	}
	var other *daemon
	if b.cfg.against != "" {
		if other, err = b.startAgainst(ctx, d); err != nil {
			return fmt.Errorf("-against: %w", err)
		}
		defer other.stop()
		cs = append(cs, contender{"-against round trip", func() error { _, err := request(ctx, other.sock, tru); return err }})
	}
	got, err := inTurns(ctx, b.cfg.n, 20, cs...)
	if err != nil {
		return err
	}
	sd, sg, sp := got[0], got[1], got[2]
	if other != nil {
		if err := b.against(ctx, d, other, sd, got[len(got)-1], sg); err != nil {
			return err
		}
	}
	// The daemon's own CPU time and run-queue wait per request, from the
	// scheduler's per-thread accounting: what the request costs it, apart
	// from waiting for a CPU on a busy machine; and the floor server's.
	cpu, queued, err := cpuPer(d, b.cfg.n, viaDaemon)
	if err != nil {
		return fmt.Errorf("daemon round trip: %w", err)
	}
	floorCPU, _, err := cpuPer(floor, b.cfg.n, viaFloor)
	if err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	sf := got[3]

	n := strconv.Itoa(b.cfg.n)
	over := pairedRatio(sd, sg)
	b.rows = append(b.rows,
		row{"1. /bin/true spawned from Go (the limit)", ms(sg.median()), sg.spread(), n, "", "", ""},
		row{"1. ping through rootgated (no run)", ms(sp.median()), sp.spread(), n, "the protocol's share", "", ""},
		row{"1. [\"true\"] through rootgated", ms(sd.median()), sd.spread(), n,
			fmt.Sprintf("%.2f× direct spawn", over), "≤ 1.5× direct", yes(over <= 1.5)},
		row{"1. rootgated's CPU time per [\"true\"] (mean)", ms(cpu), "", n, fmt.Sprintf("+ %s waiting for a CPU", ms(queued)), "≤ 0.4 ms", yes(cpu <= 400*time.Microsecond)},
		row{"1. [\"true\"] through a bare Go server (floor)", ms(sf.median()), sf.spread(), n,
			fmt.Sprintf("%.2f× direct spawn; its CPU %s per request", pairedRatio(sf, sg), ms(floorCPU)), "", ""})
	if sudoErr == nil {
		ss := got[4]
		faster := pairedRatio(ss, sd)
		b.rows = append(b.rows,
			row{"1. sudo -n true", ms(ss.median()), ss.spread(), n,
				fmt.Sprintf("rootgated %.2f× faster", faster), "≥ 4× faster", yes(faster >= 4)})
	}
	return nil
}

// against adds figure 1's rows for the -against daemon: its round trip
// (so, from the rounds of sd and so) and the CPU time per request of each
// daemon, from requests sent to each in turn.
func (b *bench) against(ctx context.Context, d, other *daemon, sd, so, sg sample) error {
	tru := [][]string{{"true"}}
	// In blocks of ten requests, each daemon's in turn, read after a
	// pause: work a daemon does just after its answers (a sync it
	// deferred) is counted in its own block.
	const block = 10
	var cpu [2]time.Duration
	for i := range max(b.cfg.n/block, 1) {
		for k := range 2 {
			which := (i + k) % 2
			dd := [2]*daemon{d, other}[which]
			run0, _, err := schedstat(dd.cmd.Process.Pid)
			if err != nil {
				return err
			}
			for range block {
				if _, err := request(ctx, dd.sock, tru); err != nil {
					return err
				}
			}
			time.Sleep(50 * time.Millisecond)
			run1, _, err := schedstat(dd.cmd.Process.Pid)
			if err != nil {
				return err
			}
			cpu[which] += run1 - run0
		}
	}
	n := strconv.Itoa(b.cfg.n)
	reqs := time.Duration(max(b.cfg.n/block, 1) * block)
	mine, theirs := cpu[0]/reqs, cpu[1]/reqs
	b.rows = append(b.rows,
		row{"1. [\"true\"] through the -against rootgated", ms(so.median()), so.spread(), n,
			fmt.Sprintf("%.2f× direct spawn; this one takes %.2f× its time", pairedRatio(so, sg), pairedRatio(sd, so)), "", ""},
		row{"1. CPU time per [\"true\"], this / -against", ms(mine) + " / " + ms(theirs), "", n,
			fmt.Sprintf("%.2f×", float64(mine)/float64(theirs)), "", ""})
	return nil
}

// cpuPer runs f n times and returns the CPU time d's threads spent, and
// their wait for a CPU, per run (schedstat).
func cpuPer(d *daemon, n int, f func() error) (cpu, queued time.Duration, err error) {
	run0, wait0, err := schedstat(d.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	for range n {
		if err := f(); err != nil {
			return 0, 0, err
		}
	}
	run1, wait1, err := schedstat(d.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	return (run1 - run0) / time.Duration(n), (wait1 - wait0) / time.Duration(n), nil
}

// schedstat sums the CPU time and the run-queue wait of pid's threads
// (/proc/PID/task/*/schedstat).
func schedstat(pid int) (run, wait time.Duration, err error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("schedstat of %d: %q", pid, b)
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		w, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("schedstat of %d: %q", pid, b)
		}
		run += time.Duration(r)
		wait += time.Duration(w)
	}
	return run, wait, nil
}

// concurrentRounds is how many rounds figure 1's concurrent half takes
// turns in: each round runs the clients against the daemon and the
// goroutines spawning directly, one after the other, and its throughput
// ratio is one of the paired ratios whose median the row shows.
const concurrentRounds = 5

// concurrent is figure 1's second half: p50/p99 under concurrent clients,
// for the daemon and for direct spawns, and the throughput ratio.
func (b *bench) concurrent(ctx context.Context) error {
	d, err := b.startDaemon(ctx, "allow any\n", false)
	if err != nil {
		return err
	}
	per := max(b.cfg.n/4/concurrentRounds, 2)
	b.progress("figure 1: %d clients × %d requests, in %d rounds", b.cfg.conc, per*concurrentRounds, concurrentRounds)
	tru := [][]string{{"true"}}
	measure := func(f func() error) (sample, time.Duration, error) {
		var mu sync.Mutex
		var s sample
		var first error
		var wg sync.WaitGroup
		t0 := time.Now()
		for range b.cfg.conc {
			wg.Go(func() {
				for range per {
					t, err := timed(f)
					mu.Lock()
					s = append(s, t)
					if err != nil && first == nil {
						first = err
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return s, time.Since(t0), first
	}
	var other *daemon
	if b.cfg.against != "" {
		if other, err = b.startAgainst(ctx, d); err != nil {
			return fmt.Errorf("-against: %w", err)
		}
	}
	through := func(d *daemon) func() (sample, time.Duration, error) {
		return func() (sample, time.Duration, error) {
			s, w, err := measure(func() error { _, err := request(ctx, d.sock, tru); return err })
			if err != nil {
				err = fmt.Errorf("concurrent daemon requests: %w", err)
			}
			return s, w, err
		}
	}
	direct := func() (sample, time.Duration, error) {
		s, w, err := measure(func() error { return exec.Command("/bin/true").Run() })
		if err != nil {
			err = fmt.Errorf("concurrent direct spawns: %w", err)
		}
		return s, w, err
	}
	floor, err := b.startFloor()
	if err != nil {
		return err
	}
	sides := []func() (sample, time.Duration, error){through(d), direct, through(floor)}
	if other != nil {
		sides = append(sides, through(other))
	}
	var sd, sg sample
	var wd, wg time.Duration
	var ratios, floors, theirs []float64 // per round: the daemon's throughput / the direct spawns', the floor server's / the direct spawns', the daemon's / the -against daemon's
	for round := range concurrentRounds {
		got := make([]sample, len(sides))
		took := make([]time.Duration, len(sides))
		for i := range sides {
			k := (i + round) % len(sides) // each round starts with the next side
			s, w, err := sides[k]()
			if err != nil {
				return err
			}
			got[k], took[k] = s, w
		}
		sd, sg = append(sd, got[0]...), append(sg, got[1]...)
		wd, wg = wd+took[0], wg+took[1]
		ratios = append(ratios, took[1].Seconds()/took[0].Seconds())
		floors = append(floors, took[1].Seconds()/took[2].Seconds())
		if other != nil {
			theirs = append(theirs, took[3].Seconds()/took[0].Seconds())
		}
	}
	slices.Sort(ratios)
	th := ratios[len(ratios)/2]
	slices.Sort(floors)
	if other != nil {
		slices.Sort(theirs)
		defer func() {
			b.rows = append(b.rows, row{fmt.Sprintf("1. %d clients, this daemon's rate / -against's", b.cfg.conc), "", "", fmt.Sprintf("%d×%d", b.cfg.conc, per*concurrentRounds),
				fmt.Sprintf("%.2f×", theirs[len(theirs)/2]), "", ""})
		}()
	}
	n := fmt.Sprintf("%d×%d", b.cfg.conc, per*concurrentRounds)
	b.rows = append(b.rows,
		row{fmt.Sprintf("1. /bin/true from Go, %d at once", b.cfg.conc), ms(sg.median()), "p99 " + ms(sg.q(0.99)), n,
			fmt.Sprintf("%.0f/s", float64(len(sg))/wg.Seconds()), "", ""},
		row{fmt.Sprintf("1. [\"true\"] via rootgated, %d clients", b.cfg.conc), ms(sd.median()), "p99 " + ms(sd.q(0.99)), n,
			fmt.Sprintf("%.0f/s = %.2f× direct's rate; p50 %.2f× direct", float64(len(sd))/wd.Seconds(), th, ratio(sd.median(), sg.median())),
			"≥ 0.7× direct's rate", yes(th >= 0.7)},
		row{fmt.Sprintf("1. [\"true\"] via the bare Go server, %d clients", b.cfg.conc), "", "", n,
			fmt.Sprintf("%.2f× direct's rate (the floor)", floors[len(floors)/2]), "", ""})
	return nil
}

// pipeline is figure 2: the same 4-stage pipeline through the daemon and
// under sh -c.
func (b *bench) pipeline(ctx context.Context) error {
	d, err := b.startDaemon(ctx, "allow any\n", false)
	if err != nil {
		return err
	}
	// The same daemon without cgroups (the fallback): whether a run's own
	// cgroup changes what autogroup does to its share.
	dn, err := b.startDaemon(ctx, "allow any\n", false, "--cgroup", "none")
	if err != nil {
		return err
	}
	size := strconv.FormatInt(b.cfg.size, 10)
	want := size + "\n"
	stages := [][]string{{"head", "-c", size, "/dev/zero"}, {"cat"}, {"cat"}, {"wc", "-c"}}
	through := func(sock string) func() error {
		return func() error {
			out, err := request(ctx, sock, stages)
			if err == nil && string(out) != want {
				err = fmt.Errorf("wc -c printed %q", out)
			}
			return err
		}
	}
	viaDaemon, viaNoCgroup := through(d.sock), through(dn.sock)
	shell := func(line string) func() error {
		return func() error {
			out, err := exec.Command("/bin/sh", "-c", line).Output()
			if err == nil && string(out) != want {
				err = fmt.Errorf("wc -c printed %q", out)
			}
			return err
		}
	}
	viaSh := shell("head -c " + size + " /dev/zero | cat | cat | wc -c")
	// rootgated starts a stage in a session of its own only where it must
	// (a daemon with a terminal, a run as another account than root);
	// where the kernel groups tasks by session for scheduling
	// (autogroup), a session per stage alone can change a pipeline's
	// share of a busy machine. This side shows it.
	viaShSessions := shell("setsid -w head -c " + size + " /dev/zero | setsid -w cat | setsid -w cat | setsid -w wc -c")
	b.progress("figure 2: %d runs of %s bytes through 4 stages, daemon / sh -c / sh -c with a session per stage / daemon without cgroups", b.cfg.runs, size)
	got, err := inTurns(ctx, b.cfg.runs, 0, contender{"pipeline via daemon", viaDaemon}, contender{"pipeline via sh -c", viaSh},
		contender{"pipeline via sh -c, setsid stages", viaShSessions}, contender{"pipeline via daemon, no cgroup", viaNoCgroup})
	if err != nil {
		return err
	}
	sd, ss, sss, sdn := got[0], got[1], got[2], got[3]
	rate := func(t time.Duration) string {
		return fmt.Sprintf("%.2f GiB/s", float64(b.cfg.size)/float64(1<<30)/t.Seconds())
	}
	th := pairedRatio(ss, sd) // throughput ratio = inverse time ratio
	n := strconv.Itoa(b.cfg.runs)
	b.rows = append(b.rows,
		row{"2. head|cat|cat|wc -c under sh -c", ms(ss.median()), ss.spread(), n, rate(ss.median()), "", ""},
		row{"2. the same, each stage setsid (a session each)", ms(sss.median()), sss.spread(), n,
			fmt.Sprintf("%s = %.3f× sh -c", rate(sss.median()), pairedRatio(ss, sss)), "", ""},
		row{"2. the same through rootgated", ms(sd.median()), sd.spread(), n,
			fmt.Sprintf("%s = %.3f× sh -c", rate(sd.median()), th), "≥ 0.95× sh -c", yes(th >= 0.95)},
		row{"2. the same through rootgated --cgroup none", ms(sdn.median()), sdn.spread(), n,
			fmt.Sprintf("%s = %.3f× sh -c", rate(sdn.median()), pairedRatio(ss, sdn)), "", ""})
	return nil
}

// capture is figure 3: a run writing size bytes to stdout and as many to
// stderr, against a fresh daemon so its VmHWM is this figure's.
func (b *bench) capture(ctx context.Context) error {
	d, err := b.startDaemon(ctx, "allow any\n", false)
	if err != nil {
		return err
	}
	if _, err := request(ctx, d.sock, [][]string{{"true"}}); err != nil {
		return err
	}
	idle, err := d.peakRSS()
	if err != nil {
		return err
	}
	size := strconv.FormatInt(b.cfg.size, 10)
	script := "head -c " + size + " /dev/zero >&2 & head -c " + size + " /dev/zero; wait"
	b.progress("figure 3: %d runs writing %s bytes to stdout and to stderr", b.cfg.runs, size)
	var st sample
	var respSize int64
	for range b.cfg.runs {
		var n int64
		t, err := timed(func() error {
			var err error
			n, err = streamRequest(ctx, d.sock, [][]string{{"sh", "-c", script}})
			return err
		})
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		st, respSize = append(st, t), n
	}
	peak, err := d.peakRSS()
	if err != nil {
		return err
	}
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	runs := strconv.Itoa(b.cfg.runs)
	b.rows = append(b.rows,
		row{"3. 1 GiB out + 1 GiB err: time to answer", ms(st.median()), st.spread(), runs, "answer " + mib(respSize), "", ""},
		row{"3. daemon peak RSS (VmHWM) meanwhile", mib(peak), "idle " + mib(idle), runs, "stderr cap 16 MiB; stdout streamed", "≤ 40 MiB", yes(peak <= 40<<20)})
	return nil
}

// streamRequest sends a request and reads its answer without keeping it,
// checking it is an ok answer with both streams truncated. It returns the
// answer's size.
func streamRequest(ctx context.Context, sock string, pipeline [][]string) (int64, error) {
	line, err := json.Marshal(&wire.Outgoing{ID: uuid.NewString(), Time: now(), Pipeline: pipeline})
	if err != nil {
		return 0, err
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	w := &ends{marks: []string{`"status":"ok"`, `"stdout_truncated":true`, `"stderr_truncated":true`}}
	n, err := io.Copy(w, c)
	if err != nil {
		return n, err
	}
	head, tail := string(w.head), string(w.tail)
	switch {
	case !w.seen[0]:
		return n, fmt.Errorf("answer is not ok: %.200s", head)
	case !w.seen[1] || !strings.HasSuffix(tail, "}\n"):
		return n, fmt.Errorf("answer is not one whole line with a truncated stdout: %s", tail)
	case !w.seen[2]:
		return n, errors.New("answer has no truncated stderr")
	}
	return n, nil
}

// ends keeps the first and last 256 bytes of an answer, and whether each
// of marks was in it: the answer's fields come before, between or after
// its 21 MiB of base64 output (stdout, with its flag, is first in a
// daemon that writes stdout as the run goes on, last in one that does
// not), so they are looked for in the whole stream, across the seams of
// its writes. Base64 has no '"': no mark is found inside the output.
type ends struct {
	head, tail []byte
	marks      []string
	seen       []bool
}

func (e *ends) Write(p []byte) (int, error) {
	if e.seen == nil {
		e.seen = make([]bool, len(e.marks))
	}
	for i, m := range e.marks {
		if !e.seen[i] {
			// A mark may straddle two writes: look at the old tail too.
			seam := append(e.tail[max(0, len(e.tail)-len(m)):len(e.tail):len(e.tail)], p[:min(len(p), len(m))]...)
			e.seen[i] = strings.Contains(string(seam), m) || strings.Contains(string(p), m)
		}
	}
	if len(e.head) < 256 {
		e.head = append(e.head, p[:min(len(p), 256-len(e.head))]...)
	}
	e.tail = append(e.tail, p[max(0, len(p)-256):]...)
	e.tail = e.tail[max(0, len(e.tail)-256):]
	return len(p), nil
}

// prompt is figure 4: the ["true"] round trip when an attached approver
// client answers at once, against the same request allowed by policy.
func (b *bench) prompt(ctx context.Context) error {
	allow, err := b.startDaemon(ctx, "allow any\n", false)
	if err != nil {
		return err
	}
	// Prompts are not held to gather identical requests into one
	// (--group-within, 300 ms by default): the figure is the protocol's
	// path, not that window.
	ask, err := b.startDaemon(ctx, "ask any\n", true, "--group-within", "0")
	if err != nil {
		return err
	}
	stop, err := attachApprover(ctx, ask.approver)
	if err != nil {
		return err
	}
	defer stop()
	tru := [][]string{{"true"}}
	b.progress("figure 4: %d rounds, allowed by policy / approved by an approver client", b.cfg.n)
	got, err := inTurns(ctx, b.cfg.n, 20,
		contender{"allowed request", func() error { _, err := request(ctx, allow.sock, tru); return err }},
		contender{"approved request", func() error { _, err := request(ctx, ask.sock, tru); return err }})
	if err != nil {
		return err
	}
	sa, sp := got[0], got[1]
	n := strconv.Itoa(b.cfg.n)
	b.rows = append(b.rows,
		row{"4. [\"true\"] allowed by policy", ms(sa.median()), sa.spread(), n, "", "", ""},
		row{"4. [\"true\"] approved by an instant approver", ms(sp.median()), sp.spread(), n,
			fmt.Sprintf("+%s (%.2f×)", ms(pairedDiff(sp, sa)), pairedRatio(sp, sa)), "", ""})
	return nil
}

// attachApprover attaches an approver-protocol client that approves every
// prompt as soon as it arrives. stop detaches it.
func attachApprover(ctx context.Context, sock string) (stop func(), err error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	if err := remote.WriteMessage(c, &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "bench"}); err != nil {
		c.Close()
		return nil, err
	}
	m, err := remote.ReadMessage(br, remote.MaxDaemonLine)
	if err != nil || m.Type != remote.MsgWelcome {
		c.Close()
		return nil, fmt.Errorf("approver not welcomed: %v %+v", err, m)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		yes := true
		for {
			m, err := remote.ReadMessage(br, remote.MaxDaemonLine)
			if err != nil {
				return
			}
			var reply *remote.Message
			switch m.Type {
			case remote.MsgPrompt:
				reply = &remote.Message{Type: remote.MsgDecision, ID: m.ID, Hash: m.Hash, Approve: &yes}
			case remote.MsgPing:
				reply = &remote.Message{Type: remote.MsgPong}
			default:
				continue
			}
			if remote.WriteMessage(c, reply) != nil {
				return
			}
		}
	}()
	return func() { c.Close(); <-done }, nil
}

// startup is figure 5: systemd-socket-activate holds the socket; the first
// connection starts rootgated. Measured from that connect to READY=1 on
// NOTIFY_SOCKET and to the first answer (a ["true"] run).
func (b *bench) startup(ctx context.Context) error {
	sa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		b.notes = append(b.notes, "systemd-socket-activate is not installed (apt-get install systemd): start-up was skipped")
		return nil
	}
	b.progress("figure 5: %d socket activations", b.cfg.startups)
	var sr, sf sample
	for range b.cfg.startups {
		tr, tf, err := b.activateOnce(ctx, sa)
		if err != nil {
			return fmt.Errorf("socket activation: %w", err)
		}
		sr, sf = append(sr, tr), append(sf, tf)
	}
	n := strconv.Itoa(b.cfg.startups)
	b.rows = append(b.rows,
		row{"5. socket activation: connect to READY=1", ms(sr.median()), sr.spread(), n, "", "", ""},
		row{"5. socket activation: connect to first answer", ms(sf.median()), sf.spread(), n, "", "≤ 50 ms", yes(sf.median() <= 50*time.Millisecond)})
	return nil
}

func (b *bench) activateOnce(ctx context.Context, sa string) (ready, first time.Duration, err error) {
	dir, err := b.tempDir()
	if err != nil {
		return 0, 0, err
	}
	pol := filepath.Join(dir, "policy")
	if err := os.WriteFile(pol, []byte("allow any\n"), 0o600); err != nil {
		return 0, 0, err
	}
	notifyPath := filepath.Join(dir, "n")
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		return 0, 0, err
	}
	defer nl.Close()
	sock := filepath.Join(dir, "s")
	cmd := exec.Command(sa, "-l", sock, "--fdname=requests", "-E", "NOTIFY_SOCKET="+notifyPath,
		b.bin, "--runtime-dir", filepath.Join(dir, "run"), "--policy", pol, "--audit", filepath.Join(dir, "audit.jsonl"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	exited := make(chan struct{})
	var log bytes.Buffer
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "Listening on") {
				said = true
				close(listening)
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	select {
	case <-listening:
	case <-exited:
		return 0, 0, fmt.Errorf("systemd-socket-activate exited: %s", log.String())
	case <-time.After(30 * time.Second):
		return 0, 0, errors.New("systemd-socket-activate did not listen within 30s")
	}

	readyC := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := nl.Read(buf)
			if err != nil {
				return
			}
			if slices.Contains(strings.Split(string(buf[:n]), "\n"), "READY=1") {
				readyC <- time.Now()
				return
			}
		}
	}()
	t0 := time.Now()
	if _, err := request(ctx, sock, [][]string{{"true"}}); err != nil {
		return 0, 0, fmt.Errorf("%w\n%s", err, log.String())
	}
	first = time.Since(t0)
	select {
	case t := <-readyC:
		ready = t.Sub(t0)
	case <-time.After(10 * time.Second):
		return 0, 0, errors.New("no READY=1 within 10s of the first answer")
	}
	return ready, first, nil
}

// print writes the table and the machine it ran on.
func (b *bench) print(w io.Writer, start time.Time, load0 string) {
	fmt.Fprintf(w, "rootgate bench, %s UTC, took %s\n", start.UTC().Format("2006-01-02 15:04"), time.Since(start).Round(time.Second))
	fmt.Fprintf(w, "machine: %s, %d CPUs, %s, kernel %s, %s\n", cpuModel(), runtime.NumCPU(), memTotal(), kernel(), runtime.Version())
	fmt.Fprintf(w, "load average: %s at start, %s at end\n\n", load0, loadavg())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmedian\tspread (p25–p75)\truns\tcomparison (median of paired ratios)\ttarget\tmet")
	for _, r := range b.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.figure, r.median, r.spread, r.n, r.compare, r.target, r.met)
	}
	tw.Flush()
	for _, n := range b.notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	n, err := statusFile("/proc/meminfo", "MemTotal:")
	if err != nil {
		return "unknown memory"
	}
	return fmt.Sprintf("%.1f GiB RAM", float64(n)/(1<<30))
}

func statusFile(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in %s", key, path)
}

func kernel() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "unknown"
	}
	var sb strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
