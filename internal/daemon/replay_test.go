package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

func TestReplayWindow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w, err := openReplay(dir, time.Minute, DefaultMaxRequestsPerUID, t0)
	if err != nil {
		t.Fatal(err)
	}
	add := func(key string, at time.Time) bool {
		t.Helper()
		fresh, err := w.Add([]string{key}, 0, at)
		if err != nil {
			t.Fatal(err)
		}
		if fresh {
			w.Done(key) // the request ended at once
		}
		return fresh
	}
	if !add("id:a", t0) || add("id:a", t0.Add(59*time.Second)) {
		t.Fatal("a key must be refused within the window")
	}
	if !add("id:a", t0.Add(61*time.Second)) {
		t.Fatal("a key must be accepted again after the window")
	}
	// A key whose request is still in progress is refused, however old.
	if fresh, err := w.Add([]string{"id:long"}, 0, t0); !fresh || err != nil {
		t.Fatalf("id:long: %v, %v", fresh, err)
	}
	if add("id:long", t0.Add(61*time.Second)) {
		t.Fatal("the key of a request in progress must be refused after the window")
	}
	w.Done("id:long")
	if !add("id:long", t0.Add(61*time.Second)) {
		t.Fatal("a key must be accepted again after the window once its request ended")
	}
	// A key with a space and a newline survives the file round trip.
	odd := "id:a b\nc"
	add(odd, t0.Add(61*time.Second))
	w.Close()
	w, err = openReplay(dir, time.Minute, DefaultMaxRequestsPerUID, t0.Add(62*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if add(odd, t0.Add(62*time.Second)) || add("id:a", t0.Add(62*time.Second)) {
		t.Fatal("keys were lost across a reopen")
	}
	// Keys are pruned once a window: after many windows of traffic, only
	// the live ones remain in memory and in the file.
	for i := range 1000 {
		add(strings.Repeat("k", i%50)+string(rune('a'+i%26))+time.Duration(i).String(), t0.Add(time.Duration(i)*time.Second))
	}
	if n := len(w.seen); n > 2*60+2 {
		t.Errorf("%d keys held after 1000 s of one request a second; the window is 60 s", n)
	}
	b, err := os.ReadFile(filepath.Join(dir, replayFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 2*60+2 {
		t.Errorf("replay file holds %d lines", n)
	}
	w.Close()
}

// TestReplayWindowRequestKeys: an id-less request's keys (its line's
// SHA-256 and its made-up id) are one request: refused if either is taken,
// held and remembered together, and counted once against its uid's cap.
func TestReplayWindowRequestKeys(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w, err := openReplay(t.TempDir(), time.Minute, 2, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	add := func(uid int, keys ...string) bool {
		t.Helper()
		fresh, err := w.Add(keys, uid, t0)
		if err != nil {
			t.Fatal(err)
		}
		return fresh
	}
	if !add(1000, "sha256:a", "id:made") {
		t.Fatal("a fresh request was refused")
	}
	if add(1000, "id:made") || add(1000, "sha256:b", "id:made") || add(1000, "sha256:a", "id:other") {
		t.Fatal("a request taking a key of the first was accepted")
	}
	w.Done("sha256:a", "id:made")
	if add(1000, "id:made") {
		t.Fatal("a made-up id was forgotten when its request ended")
	}
	// Refused requests used up nothing: uid 1000 has one more.
	if !add(1000, "sha256:c", "id:made2") {
		t.Fatal("the second request of uid 1000 was refused")
	}
	if fresh, err := w.Add([]string{"id:third"}, 1000, t0); fresh || wire.CodeOf(err) != wire.CodeRateLimit {
		t.Fatalf("the third request of uid 1000: %v, %v; want rate_limit", fresh, err)
	}
	if !add(1000+1, "id:third") {
		t.Fatal("the key of a request refused for its uid's cap was taken")
	}
}

// TestReplayFileUIDs: the file names the uid of each request, so that a
// reopened window counts a uid's requests as the old one did; lines of the
// older form, without a uid, are still refused but count for no one.
func TestReplayFileUIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	exp := t0.Add(time.Minute).UnixNano()
	// A file of the older form, one key a line, and a torn last line.
	old := fmt.Sprintf("%d \"id:old a\"\n%d \"id:torn\"", exp, exp)
	if err := os.WriteFile(filepath.Join(dir, replayFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := openReplay(dir, time.Minute, 2, t0)
	if err != nil {
		t.Fatal(err)
	}
	add := func(uid int, keys ...string) error {
		t.Helper()
		fresh, err := w.Add(keys, uid, t0.Add(time.Second))
		if err == nil && !fresh {
			return errors.New("duplicate")
		}
		if fresh {
			w.Done(keys...)
		}
		return err
	}
	if err := add(1000, "id:old a"); err == nil {
		t.Fatal("a key of the older file form was forgotten")
	}
	if err := add(1001, "id:torn"); err != nil {
		t.Fatalf("a torn line's key: %v", err)
	}
	for _, keys := range [][]string{{"sha256:x", "id:x"}, {"id:y \"q\""}} {
		if err := add(1000, keys...); err != nil {
			t.Fatalf("%q of uid 1000: %v", keys, err)
		}
	}
	if err := add(0, "id:root"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // reopened, and reopened from the rewritten file
		w.Close()
		if w, err = openReplay(dir, time.Minute, 2, t0.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := add(1000, "id:z"); wire.CodeOf(err) != wire.CodeRateLimit {
			t.Fatalf("uid 1000 past its cap after a reopen: %v, want rate_limit", err)
		}
		for _, k := range []string{"id:old a", "sha256:x", "id:x", "id:y \"q\"", "id:root"} {
			if err := add(1001, k); err == nil {
				t.Fatalf("%q was forgotten", k)
			}
		}
	}
	w.Close()
}

// TestReplayFileNotTrusted: the replay file is read only as the daemon
// writes it. A file at its path that is another uid's, that others may
// write, with a second link, a FIFO (which must not hold the start) or a
// symlink stops the window's opening with an error naming the file and
// why; the daemon's own 0600 file opens.
func TestReplayFileNotTrusted(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(time.Hour).UnixNano()
	line := []byte(fmt.Sprintf("%d 1000 \"id:a\"\n", exp))
	for _, c := range []struct {
		name, want string
		plant      func(t *testing.T, path string)
	}{
		{"own", "", func(t *testing.T, path string) { writeFile(t, path, line, 0o600) }},
		{"other uid", "owned by uid 65534", func(t *testing.T, path string) {
			writeFile(t, path, line, 0o600)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"others may write", "mode 0622", func(t *testing.T, path string) { writeFile(t, path, line, 0o622) }},
		{"second link", "2 links", func(t *testing.T, path string) {
			writeFile(t, path, line, 0o600)
			if err := os.Link(path, path+".other"); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", "not a regular file", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink", "symlink", func(t *testing.T, path string) {
			writeFile(t, path+".target", line, 0o600)
			if err := os.Symlink(path+".target", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if os.Geteuid() != 0 && c.name == "other uid" {
				t.Fatal("needs root to plant another uid's file: run the tests as the README says")
			}
			dir := t.TempDir()
			path := filepath.Join(dir, replayFile)
			c.plant(t, path)
			w, err := openReplay(dir, time.Hour, 10, time.Now())
			if c.want == "" {
				if err != nil {
					t.Fatalf("the daemon's own file: %v", err)
				}
				defer w.Close()
				if fresh, _ := w.Add([]string{"id:a"}, 1000, time.Now()); fresh {
					t.Fatal("the own file's request was forgotten")
				}
				return
			}
			if err == nil {
				w.Close()
				t.Fatalf("a replay file that is not the daemon's (%s) was read", c.name)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q, want one naming %s and saying %q", err, path, c.want)
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}
