package daemon_test

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
