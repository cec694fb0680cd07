package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// uidLines returns the lines of the audit log of the daemon in dir that
// uid's requests added, by kind: the records with uid as their peer, and
// those of the requests such a record names.
func uidLines(t *testing.T, dir string, uid uint32) map[audit.Kind][][]byte {
	t.Helper()
	raw, err := os.ReadFile(auditPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	rs := records(t, dir)
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if len(lines) != len(rs) {
		t.Fatalf("%d lines, %d records: the log rotated", len(lines), len(rs))
	}
	ids := map[string]bool{}
	out := map[audit.Kind][][]byte{}
	for i, rec := range rs {
		if rec.Peer != nil && rec.Peer.UID == int(uid) {
			ids[rec.ID] = true
		} else if !ids[rec.ID] || rec.ID == "" {
			continue
		}
		out[rec.Kind] = append(out[rec.Kind], lines[i])
	}
	return out
}

// TestManyEnvKeysRecordedBounded: a request allowed to run, from a uid
// other than root (nobody), whose line is made long with many LC_* env
// keys and empty arguments (which an excerpt of each long word does not
// shorten) has a received record of at most about 12 KiB: the first env
// keys and words, then how many more, whose request line's SHA-256 the
// record keeps.
func TestManyEnvKeysRecordedBounded(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	openToAll(t, d)
	env := map[string]string{}
	for i := range 20000 {
		env[fmt.Sprintf("LC_%05d", i)] = "C"
	}
	argv := append([]string{"true"}, make([]string, 100000)...)
	r := sendAs(t, d.Sock, 65534, 65534, []uint32{}, request(map[string]any{"id": "many-env", "env": env, "pipeline": [][]string{argv}}))
	if r.Status != wire.StatusOK {
		t.Fatalf("%.300s", r.raw)
	}
	waitTrail(t, d.Dir, "many-env", "received decided started finished")
	lines := uidLines(t, d.Dir, 65534)[audit.KindReceived]
	if len(lines) != 1 {
		t.Fatalf("%d received records of nobody", len(lines))
	}
	var rec audit.Record
	if err := json.Unmarshal(lines[0], &rec); err != nil {
		t.Fatal(err)
	}
	q := rec.Request
	if len(lines[0]) > 14<<10 || q == nil || !strings.Contains(q.Env["…"], " more keys, in the request line's sha256]") || len(q.Pipeline) != 1 ||
		!strings.Contains(q.Pipeline[0][len(q.Pipeline[0])-1], " more words, in the request line's sha256]") || q.LineSHA256 == "" {
		t.Errorf("received record of %d bytes: %.500s", len(lines[0]), lines[0])
	}
}
