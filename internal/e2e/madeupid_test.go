package e2e

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// TestMadeUpIDTaken: a request without an id gets one the daemon makes
// up, and its replay key is the line's SHA-256; the requester hears that
// id in its progress lines while the run goes on. Sent back as the id of
// a second request, it was accepted while the first ran: two runs under
// one id, whose records `rootgate audit show --id` showed as one
// request's, and whose ends the trail cannot tell apart (the first run's
// end was taken for the second's after a crash). The made-up id is held
// while its request is in progress, as a given id is.
func TestMadeUpIDTaken(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	d := startDaemon(t, opts{Dir: dir, Args: []string{"--cgroup", "none"}})
	m := runMarker()
	killAtEnd(t, m)
	id := madeUpRun(t, d, m)

	wantError(t, d.send(map[string]any{"id": id, "pipeline": [][]string{{"true"}}}), `duplicate request id "`+id+`"`)
	if k := kinds(trail(t, dir, id)); k != "received decided started rejected" {
		t.Fatalf("records of %s: %s, want the run's and one rejected", id, k)
	}
}

// TestMadeUpIDRemembered: the id the daemon made up for a request without
// one was held only while that request ran, never recorded in the replay
// window. Once the run ended, the requester, which read the id in the
// answer, sent it back as the id of a new request, which ran: two runs,
// two decisions, under one id, whose trails `rootgate audit show --id`
// merged into one. A made-up id is remembered for the window like a given
// one, and a request sent under it is refused as a replay.
func TestMadeUpIDRemembered(t *testing.T) {
	t.Parallel()
	// After a crash too: the made-up id is remembered in the replay
	// window's file, not only in memory. Keeping only a line's SHA-256
	// in the file let the second run through the next daemon.
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "same daemon", true: "after a crash"}[crash], func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			d := startDaemon(t, opts{Dir: dir})
			id := wantOK(t, d.send(map[string]any{"id": nil})).ID
			if id == "" {
				t.Fatal("the answer to an id-less request names no id")
			}
			waitTrail(t, dir, id, "received decided started finished")
			if crash {
				d.Cmd.Process.Kill()
				<-d.Done()
				d = startDaemon(t, opts{Dir: dir})
			}
			wantError(t, d.send(map[string]any{"id": id}), `duplicate request id "`+id+`"`)
			if k := kinds(trail(t, dir, id)); k != "received decided started finished rejected" {
				t.Fatalf("records of %s: %s, want the first run's and one rejected", id, k)
			}
		})
	}
}

// TestMadeUpIDHeldPastWindow: a run may outlast the replay window
// (2 × --max-skew; --exec-timeout is longer by default). The id the
// daemon made up for an id-less request, told to the requester in its
// progress lines, stays taken while the run goes on after the window
// has passed, as a given id does: sent back then as the id of a new
// request, it is refused. Held only for the window, it named two
// runs in progress at once.
func TestMadeUpIDHeldPastWindow(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	d := startDaemon(t, opts{Dir: dir, Args: []string{"--cgroup", "none", "--max-skew", "2s"}})
	m := runMarker()
	killAtEnd(t, m)
	id := madeUpRun(t, d, m)

	windowPasses(t, d, "probe-"+m)
	if len(procsWith(m)) != 1 {
		t.Fatal("the run ended before the window passed")
	}
	wantError(t, d.send(map[string]any{"id": id}), `duplicate request id "`+id+`"`)
	if k := kinds(trail(t, dir, id)); k != "received decided started rejected" {
		t.Fatalf("records of %s: %s, want the run's and one rejected", id, k)
	}
}

// madeUpRun sends d a request without an id that runs sleep m, keeps its
// connection open until the test ends, and returns the id the daemon
// made up for it (its first progress line's) once the sleep runs.
func madeUpRun(t *testing.T, d *daemonProc, m string) string {
	t.Helper()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte(request(map[string]any{"id": nil, "progress": true, "pipeline": [][]string{{"sleep", m}}}))); err != nil {
		t.Fatal(err)
	}
	l := &lineReader{t: t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
	line := l.next()
	id, ok := strings.CutPrefix(line, `{"id":"`)
	id, _, _ = strings.Cut(id, `"`)
	if _, _, isProgress := wire.ParseProgress([]byte(line)); !ok || !isProgress || id == "" {
		t.Fatalf("first line %q, want a progress line with the made-up id", line)
	}
	waitFor(t, "the run", 10*time.Second, func() bool { return len(procsWith(m)) == 1 })
	return id
}

// windowPasses returns once d's replay window has passed: a short run
// under the id probe, sent again, is accepted again.
func windowPasses(t *testing.T, d *daemonProc, probe string) {
	t.Helper()
	wantOK(t, d.send(map[string]any{"id": probe, "pipeline": [][]string{{"true"}}}))
	waitFor(t, "the window to pass", 20*time.Second, func() bool {
		r := d.send(map[string]any{"id": probe, "pipeline": [][]string{{"true"}}})
		if r.Status != wire.StatusOK && !strings.Contains(r.Message, "duplicate request id") {
			t.Fatalf("probe %s: %s", probe, r.raw)
		}
		return r.Status == wire.StatusOK
	})
}
