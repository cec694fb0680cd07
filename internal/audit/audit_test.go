package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// writeLog appends n request records to a fresh log in dir and returns
// its path.
func writeLog(t *testing.T, dir string, n int, opt Options) string {
	t.Helper()
	path := filepath.Join(dir, "audit.jsonl")
	l, err := Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range n {
		if err := l.Append(&Record{Kind: KindReceived, ID: fmt.Sprintf("req-%d", i), Peer: &Peer{UID: 1000, PID: 42 + i}}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func verifyPath(t *testing.T, path string) (Summary, error) {
	t.Helper()
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	return Verify(files)
}

func TestLogChains(t *testing.T) {
	dir := t.TempDir()
	path := writeLog(t, dir, 5, Options{})
	sum, err := verifyPath(t, path)
	if err != nil {
		t.Fatal(err)
	}
	// genesis + 5
	if sum.Records != 6 || sum.FirstSeq != 1 || sum.LastSeq != 6 || sum.Genesis == "" || sum.Files != 1 {
		t.Fatalf("summary %+v", sum)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	// A second daemon (or a restart) continues the same chain.
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Record{Kind: KindOpened, Daemon: &Daemon{Version: "t", PID: 1}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if sum, err = verifyPath(t, path); err != nil || sum.LastSeq != 7 {
		t.Fatalf("after reopen: %+v %v", sum, err)
	}
}

func TestOpenCreatesPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log", "rootgate")
	path := writeLog(t, dir, 1, Options{})
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
}

// TestConcurrentWriters: two Logs on one file (two daemons, or a daemon
// and its restart) keep one chain.
func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var wg sync.WaitGroup
	for w := range 2 {
		l, err := Open(path, Options{MaxSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					if err := l.Append(&Record{Kind: KindReceived, ID: fmt.Sprintf("%d-%d-%d", w, g, i)}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	sum, err := verifyPath(t, path)
	if err != nil {
		t.Fatal(err)
	}
	received := 0
	files, _ := Files(path)
	_ = ReadAll(files, func(r Read) error {
		if r.Err != nil {
			t.Errorf("%s:%d: %v", r.File, r.Line, r.Err)
		} else if r.Record.Kind == KindReceived {
			received++
		}
		return nil
	})
	if received != 200 || sum.Files < 2 {
		t.Fatalf("%d received records in %d files, want 200 in several", received, sum.Files)
	}
}

func TestRotationKeepsChain(t *testing.T) {
	dir := t.TempDir()
	path := writeLog(t, dir, 40, Options{MaxSize: 1000})
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("files %v: want rotation", files)
	}
	for _, f := range files[:len(files)-1] {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 1000 {
			t.Errorf("%s: %d bytes, over the limit", f, fi.Size())
		}
	}
	sum, err := Verify(files)
	if err != nil {
		t.Fatal(err)
	}
	// Verifying from a later file on (earlier ones pruned) works too, but
	// has no genesis.
	later, err := Verify(files[1:])
	if err != nil || later.Genesis != "" || later.LastSeq != sum.LastSeq {
		t.Fatalf("from the second file: %+v %v", later, err)
	}
	// A missing file in the middle is a gap.
	_, err = Verify(append([]string{files[0]}, files[2:]...))
	wantProblem(t, err, filepath.Base(files[2]), 1, "missing")
}

// TestTamper: each way of tampering is reported at the exact record.
func TestTamper(t *testing.T) {
	type edit func(lines [][]byte) [][]byte
	cases := []struct {
		name string
		edit edit
		line int
		what string
	}{
		{"edit", func(l [][]byte) [][]byte {
			l[3] = bytes.Replace(l[3], []byte(`"uid":1000`), []byte(`"uid":0`), 1)
			return l
		}, 4, "hash does not match"},
		{"edit last", func(l [][]byte) [][]byte {
			l[6] = bytes.Replace(l[6], []byte(`req-5`), []byte(`req-X`), 1)
			return l
		}, 7, "hash does not match"},
		{"delete", func(l [][]byte) [][]byte { return append(l[:2:2], l[3:]...) }, 3, "1 record(s) missing"},
		{"reorder", func(l [][]byte) [][]byte { l[2], l[3] = l[3], l[2]; return l }, 3, "missing"},
		{"truncate", func(l [][]byte) [][]byte {
			l[6] = l[6][:len(l[6])/2]
			return l
		}, 7, "cut short"},
		{"duplicate", func(l [][]byte) [][]byte { return append(l[:4:4], l[3:]...) }, 5, "out of order or repeated"},
		{"garbage", func(l [][]byte) [][]byte { l[1] = []byte("hello"); return l }, 2, "not a valid JSON record"},
		{"genesis removed", func(l [][]byte) [][]byte { return l[1:] }, 1, "not genesis or rotated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeLog(t, dir, 6, Options{})
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.SplitAfter(b, []byte("\n"))
			lines = lines[:len(lines)-1]
			for i := range lines {
				lines[i] = bytes.TrimSuffix(lines[i], []byte("\n"))
			}
			lines = c.edit(lines)
			out := bytes.Join(lines, []byte("\n"))
			if c.name != "truncate" {
				out = append(out, '\n')
			}
			if err := os.WriteFile(path, out, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = verifyPath(t, path)
			wantProblem(t, err, "audit.jsonl", c.line, c.what)
			// A daemon refuses to append to a log whose end is damaged.
			if c.line == len(lines) {
				if l, err := Open(path, Options{}); err == nil {
					if err := l.Append(&Record{Kind: KindReceived}); err == nil {
						t.Error("appended to a damaged log")
					}
					l.Close()
				}
			}
		})
	}
}

func wantProblem(t *testing.T, err error, file string, line int, what string) {
	t.Helper()
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("got %v, want a problem at %s:%d", err, file, line)
	}
	if filepath.Base(p.File) != file || p.Line != line || !strings.Contains(p.What, what) {
		t.Fatalf("got %v, want %s:%d: …%s…", p, file, line, what)
	}
}

func TestSplitEnv(t *testing.T) {
	plain, hashed := SplitEnv(map[string]string{
		"LANG": "C", "GITHUB_TOKEN": "ghp_x", "db_password": "hunter2", "Secret_Sauce": "s", "SSH_KEY_PATH": "k", "DEBUG": "1",
	})
	if len(plain) != 2 || plain["LANG"] != "C" || plain["DEBUG"] != "1" {
		t.Errorf("plain %v", plain)
	}
	for k, v := range map[string]string{"GITHUB_TOKEN": "ghp_x", "db_password": "hunter2", "Secret_Sauce": "s", "SSH_KEY_PATH": "k"} {
		if hashed[k] != SHA256([]byte(v)) {
			t.Errorf("%s: %q", k, hashed[k])
		}
	}
}

// FuzzVerify throws arbitrary bytes at the verifier, alone and after a
// valid log: it must never panic, and whatever it accepts must read back
// as records with consecutive seqs.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		if err := l.Append(&Record{Kind: KindReceived, ID: fmt.Sprint(i), Request: &Request{Pipeline: [][]string{{"id"}}, Env: map[string]string{"A": "\x1b[31m\n"}}}); err != nil {
			f.Fatal(err)
		}
	}
	l.Close()
	valid, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid, false)
	f.Add([]byte(`{"seq":1}`+"\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, after bool) {
		if after {
			data = append(append([]byte(nil), valid...), data...)
		}
		v := &verifier{}
		err := v.file("fuzz", bytes.NewReader(data))
		if err != nil {
			var p *Problem
			if !errors.As(err, &p) || p.Line < 1 {
				t.Fatalf("not a problem with a line: %v", err)
			}
			return
		}
		var seq uint64
		lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		if len(data) == 0 {
			lines = nil
		}
		for i, b := range lines {
			r, err := decode(b)
			if err != nil {
				t.Fatalf("line %d verified but does not decode: %v", i+1, err)
			}
			if i > 0 && r.Seq != seq+1 {
				t.Fatalf("line %d: seq %d after %d verified", i+1, r.Seq, seq)
			}
			seq = r.Seq
		}
	})
}

// TestDocExample: the log shown in docs/audit.md is a real one that
// verifies, and holds the record kinds the doc says it does.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(doc, []byte("<!-- audit-example -->\n```jsonl\n"))
	if !ok {
		t.Fatal("docs/audit.md has no audit-example block")
	}
	example, _, ok := bytes.Cut(after, []byte("```"))
	if !ok {
		t.Fatal("unterminated example")
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, example, 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := verifyPath(t, path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = ReadAll([]string{path}, func(r Read) error {
		got = append(got, string(r.Record.Kind))
		return nil
	})
	if strings.Join(got, " ") != "genesis opened received decided started finished" || sum.Records != 6 {
		t.Fatalf("kinds %v", got)
	}
	if !bytes.Contains(doc, []byte("last hash "+sum.LastHash)) || !bytes.Contains(doc, []byte("genesis "+sum.Genesis)) {
		t.Error("the verify output in docs/audit.md does not match the example")
	}
}

// TestFileMovedAway: the live file moved away under a running Log is
// noticed at the next append.
func TestFileMovedAway(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(&Record{Kind: KindReceived, ID: "a"}); err != nil {
		t.Fatal(err)
	}
	// Moved to a rotated name: the chain continues from it.
	if err := os.Rename(path, path+".00000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Record{Kind: KindReceived, ID: "b"}); err != nil {
		t.Fatal(err)
	}
	sum, err := verifyPath(t, path)
	if err != nil || sum.Files != 2 || sum.LastSeq != 4 || sum.Genesis == "" {
		t.Fatalf("%+v %v", sum, err)
	}
	// Moved anywhere else: a new log.
	if err := os.Rename(path+".00000000000000000001", path+".old1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".old2"); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Record{Kind: KindReceived, ID: "c"}); err != nil {
		t.Fatal(err)
	}
	sum, err = verifyPath(t, path)
	if err != nil || sum.Files != 1 || sum.LastSeq != 2 || sum.Genesis == "" {
		t.Fatalf("%+v %v", sum, err)
	}
}

// TestAppendLater: records appended for later are in the file at once, in
// the chain, and stay there across a rotation and a durable append.
func TestAppendLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{MaxSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 20 {
		r := &Record{Kind: KindReceived, ID: fmt.Sprintf("later-%d", i)}
		if err := l.AppendLater(r); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"id":"later-`+fmt.Sprint(i)+`"`) {
			t.Fatalf("record %d is not in the file after AppendLater", i)
		}
	}
	if err := l.Append(&Record{Kind: KindReceived, ID: "durable"}); err != nil {
		t.Fatal(err)
	}
	sum, err := verifyPath(t, path)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Files < 2 || sum.LastSeq < 22 {
		t.Fatalf("summary %+v: want the 21 records and the genesis across rotated files", sum)
	}
}
