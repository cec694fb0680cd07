package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// TestReplayWindowPerUID: one requester cannot fill the replay window.
// Every fresh id is remembered for 2 × --max-skew, in memory and in the
// runtime directory's file (a tmpfs, /run, under systemd); pings with ids
// of 128 four-byte characters cost the requester nothing, so a flood of
// them grew both by about half a kilobyte each, thousands a second. Here
// uid nobody may have 20 requests in the window (--max-requests-per-uid):
// its 21st is refused with rate_limit and not remembered, while root and
// another uid are still served.
func TestReplayWindowPerUID(t *testing.T) {
	t.Parallel()
	const nobody, other, max = 65534, 64999, 20
	d := startDaemon(t, opts{Args: []string{"--max-requests-per-uid", fmt.Sprint(max)}})
	openToAll(t, d)
	pad := strings.Repeat("\U0001F600", wire.MaxIDLen-8)
	ping := func(i int) string {
		return request(map[string]any{"id": fmt.Sprintf("%s%08d", pad, i), "action": "ping", "pipeline": nil})
	}
	for i := range max {
		if r := sendAs(t, d.Sock, nobody, nobody, []uint32{}, ping(i)); r.Status != wire.StatusOK {
			t.Fatalf("ping %d of uid %d: %s", i, nobody, r.raw)
		}
	}
	r := sendAs(t, d.Sock, nobody, nobody, []uint32{}, ping(max))
	if want := wire.ReplayFullError(nobody, max, 2*time.Minute).Error(); r.Status != wire.StatusError || r.Code != wire.CodeRateLimit || r.Message != want {
		t.Fatalf("ping %d of uid %d: got %s, want error %q", max, nobody, strings.TrimSpace(r.raw), want)
	}
	for _, uid := range []uint32{0, other} {
		if r := sendAs(t, d.Sock, uid, uid, []uint32{}, ping(1000+int(uid))); r.Status != wire.StatusOK {
			t.Errorf("uid %d is not served: %s", uid, r.raw)
		}
	}
	b, err := os.ReadFile(filepath.Join(d.Dir, "run", "replay"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), pad); n != max+2 {
		t.Errorf("the replay file holds %d long ids, want %d: %d bytes", n, max+2, len(b))
	}
}

// TestReplayCapSurvivesRestart: the replay file named no uid, so a
// restarted daemon (socket activation with --idle-exit restarts it often)
// loaded the ids of a requester that had used up its
// --max-requests-per-uid but counted none of them against it: a fresh
// budget each restart, while its earlier ids still filled the window. Each
// line names its uid, and the counts are rebuilt at start.
func TestReplayCapSurvivesRestart(t *testing.T) {
	t.Parallel()
	const max, nobody = 3, 65534
	u := addAccount(t, "frop")
	dir := shortDir(t)
	o := opts{Dir: dir, Args: []string{"--max-requests-per-uid", fmt.Sprint(max)}}
	d := startDaemon(t, o)
	openToAll(t, d)
	ping := func(sock string, uid uint32) response {
		return sendAs(t, sock, uid, uid, []uint32{}, request(map[string]any{"action": "ping", "pipeline": nil}))
	}
	full := wire.ReplayFullError(int(u.uid), max, 2*time.Minute).Error()
	for i := range max {
		if r := ping(d.Sock, u.uid); r.Status != wire.StatusOK {
			t.Fatalf("ping %d of %s: %s", i, u.name, r.raw)
		}
	}
	if r := ping(d.Sock, u.uid); r.Code != wire.CodeRateLimit || r.Message != full {
		t.Fatalf("ping %d of %s: got %s, want error %q", max, u.name, strings.TrimSpace(r.raw), full)
	}
	d.Stop()

	d2 := startDaemon(t, o)
	openToAll(t, d2)
	if r := ping(d2.Sock, u.uid); r.Code != wire.CodeRateLimit || r.Message != full {
		t.Fatalf("after a restart, a ping of %s: got %s, want error %q", u.name, strings.TrimSpace(r.raw), full)
	}
	for _, uid := range []uint32{0, nobody} {
		if r := ping(d2.Sock, uid); r.Status != wire.StatusOK {
			t.Errorf("after a restart, uid %d is not served: %s", uid, r.raw)
		}
	}
}
