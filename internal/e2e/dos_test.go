package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// testAccount creates the local account name for the test, with no home
// and no login shell, and returns its uid and gid.
func testAccount(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	a := addAccount(t, name, "-M", "-s", "/usr/sbin/nologin")
	return a.uid, a.gid
}

// startFails runs rootgated with dir's runtime directory and requires it to
// refuse to start with want in its error.
func startFails(t *testing.T, dir, runtimeDir, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rootgated, "--socket", filepath.Join(dir, "s"), "--approver-socket", "",
		"--runtime-dir", runtimeDir, "--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("rootgated started on runtime dir %s (want it refused: %s)\n%s", runtimeDir, want, out)
	}
	if err == nil || !strings.Contains(string(out), "rootgated: error: runtime directory: "+want) {
		t.Fatalf("rootgated on runtime dir %s: %v, want error %q\n%s", runtimeDir, err, want, out)
	}
}

// TestRuntimeDirChecked: a runtime directory another user owns, or that
// group or others may write (sticky or not), or that is reached through a
// directory or a link another user owns, is refused at start, since root
// rewrites files in it; a root-owned 0755 one is used.
func TestRuntimeDirChecked(t *testing.T) {
	t.Parallel()
	uid, gid := testAccount(t, "rgtfa")
	dir := shortDir(t)
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"owned-by-requester", 0o755, int(uid), "is owned by uid " + strconv.Itoa(int(uid)) + ", not by root"},
		{"group-writable", 0o775, 0, "is writable by group or others"},
		{"world-writable-sticky", 0o777 | os.ModeSticky, 0, "is writable by group or others"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := filepath.Join(dir, c.name)
			if err := os.Mkdir(rd, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(rd, c.uid, int(gid)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(rd, c.mode); err != nil {
				t.Fatal(err)
			}
			startFails(t, dir, rd, rd+" "+c.want)
		})
	}
	// A root-owned directory inside one the requester owns, which it could
	// swap for a symlink after the daemon checked the directory itself.
	parent := filepath.Join(dir, "parent")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(parent, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(parent, "run")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	startFails(t, dir, inner, inner+": "+parent+" is owned by uid "+strconv.Itoa(int(uid))+", not by root")
	// A root-owned directory reached through the requester's link, which
	// it could re-point at its own tree once the daemon runs.
	roots := filepath.Join(dir, "roots")
	if err := os.MkdirAll(filepath.Join(roots, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(roots, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	startFails(t, dir, filepath.Join(link, "run"), filepath.Join(link, "run")+": "+link+" is owned by uid "+strconv.Itoa(int(uid))+", not by root")
	// The legitimate case: root's own directory, 0755.
	ok := filepath.Join(dir, "ok")
	if err := os.Mkdir(ok, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Args: []string{"--runtime-dir", ok}})
	d.alive()
}

// TestReplayTmpSymlinkNotFollowed: a replay.tmp symlink left in the runtime
// directory (planted before it was root's, or by a crash of something else)
// does not make root write through it; the daemon replaces it with its own
// file and serves.
func TestReplayTmpSymlinkNotFollowed(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	rd := filepath.Join(dir, "run")
	if err := os.Mkdir(rd, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(rd, "replay.tmp")); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Dir: dir})
	d.alive()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the symlink's target was written through: %q, %v", b, err)
	}
	fi, err := os.Lstat(filepath.Join(rd, "replay"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("replay file: %v, %v", fi, err)
	}
}

// holdConns is a requester that opens up to $ARGV[1] connections to the
// socket $ARGV[0] and sends nothing; it prints how many it opened, then
// each answer it gets (index and line) until it has $ARGV[2] of them or
// 20 s pass, then "done", and holds every connection until stdin closes.
const holdConns = `
use IO::Socket::UNIX; use IO::Select;
$| = 1;
my ($path, $n, $want) = @ARGV;
my @c;
for (1..$n) { my $s = IO::Socket::UNIX->new(Peer => $path) or last; push @c, $s; }
print "open ", scalar(@c), "\n";
my $sel = IO::Select->new(@c);
my ($got, $end) = (0, time + 20);
while ($got < $want && time < $end) {
	for my $s ($sel->can_read(0.5)) {
		my $line = <$s>; $sel->remove($s);
		next unless defined $line;
		$got++; print "answer ", $line;
	}
}
print "done\n";
<STDIN>;
`

// TestConnectionShares: one requester (rgtfa) holding every connection it
// can, idle, takes at most its share of --max-conns; the extra ones are
// told so at once, and another user (rgtfb) and root are still served.
func TestConnectionShares(t *testing.T) {
	t.Parallel()
	auid, agid := testAccount(t, "rgtfg")
	buid, bgid := testAccount(t, "rgtfh")
	// A long first-byte deadline: the held connections stay in flight for
	// the whole test.
	d := startDaemon(t, opts{Args: []string{"--first-byte-timeout", "60s"}})
	openToAll(t, d)
	const conns, share = 64, 16 // the defaults: --max-conns 64, a quarter each
	cmd := exec.Command("perl", "-e", holdConns, d.Sock, strconv.Itoa(conns), strconv.Itoa(conns-share))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: auid, Gid: agid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	busy := fmt.Sprintf("server busy: too many connections from uid %d in flight (max %d)", auid, share)
	answers := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "done" {
			break
		}
		if msg, ok := strings.CutPrefix(line, "answer "); ok {
			var r wire.Response
			if err := json.Unmarshal([]byte(msg), &r); err != nil || r.Status != wire.StatusError || r.Message != busy {
				t.Fatalf("an extra connection of rgtfa got %s, want error %q", msg, busy)
			}
			answers++
		} else if line != "open "+strconv.Itoa(conns) {
			t.Fatalf("holder: %s", line)
		}
	}
	if answers != conns-share {
		t.Fatalf("%d of rgtfa's %d connections were refused, want %d", answers, conns, conns-share)
	}
	// rgtfa still holds its 16; the others are served meanwhile.
	r := sendAs(t, d.Sock, buid, bgid, []uint32{}, request(map[string]any{"action": "ping", "pipeline": nil}))
	if r.Status != wire.StatusOK || r.Message != "pong" {
		t.Fatalf("rgtfb got %s while rgtfa held its connections", r.raw)
	}
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	// And rgtfa itself, once it lets go.
	stdin.Close()
	cmd.Wait()
	waitFor(t, "rgtfa served again", 10*time.Second, func() bool {
		r, err := trySendAs(d.Sock, auid, agid, []uint32{}, request(map[string]any{"action": "ping", "pipeline": nil}))
		return err == nil && r.Status == wire.StatusOK
	})
}

// TestFirstByteDeadline: a connection that sends nothing is answered and
// closed once --first-byte-timeout passes, long before the 10 s line
// deadline; one that starts in time may take longer over the rest.
func TestFirstByteDeadline(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--first-byte-timeout", "300ms"}})
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	began := time.Now()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	wantError(t, readResponse(t, c), "request not started within 300ms")
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the silent connection was answered after %s", took)
	}
	// A client that begins in time and finishes after the first-byte
	// deadline is served.
	c2, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(30 * time.Second))
	line := request(map[string]any{"pipeline": [][]string{{"true"}}})
	if _, err := c2.Write([]byte(line[:1])); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // slower than the first-byte deadline, on purpose
	if _, err := c2.Write([]byte(line[1:])); err != nil {
		t.Fatal(err)
	}
	wantOK(t, readResponse(t, c2))
}
