package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/termsafe"
)

const exampleTime = "2026-02-13T14:30:00Z"

// line builds a request line from base fields plus overrides; a nil value
// deletes a field.
func line(t testing.TB, over map[string]any) []byte {
	t.Helper()
	m := map[string]any{"time": exampleTime, "pipeline": [][]string{{"true"}}}
	for k, v := range over {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeExample(t *testing.T) {
	b, err := readGolden("request.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "550e8400-e29b-41d4-a716-446655440000" || !r.IDGiven || r.Host != "workstation.local" ||
		r.Session != "claude-code-project-alpha" || r.TimeText != exampleTime ||
		len(r.Pipeline) != 1 || strings.Join(r.Pipeline[0], " ") != "apt install nginx" ||
		r.Env["DEBIAN_FRONTEND"] != "noninteractive" || r.Reason != "Install nginx to set up a web server" ||
		!r.Privileged || !r.PrivilegedSet || r.ForwardAgent || r.Action != ActionExec || r.Cwd != "/" {
		t.Fatalf("decoded wrongly: %+v", r)
	}
}

func TestDecodeDefaults(t *testing.T) {
	r, err := Decode([]byte(`{"time":"` + exampleTime + `","pipeline":[["id"]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(r.ID) {
		t.Errorf("default id %q is not a UUIDv4", r.ID)
	}
	if r.IDGiven || !r.Privileged || r.PrivilegedSet || r.ForwardAgent || r.Action != ActionExec ||
		r.Cwd != "/" || r.Stdin != nil || r.Timeout != 0 || len(r.Env) != 0 || r.Host != "" || r.Session != "" || r.Reason != "" {
		t.Errorf("defaults wrong: %+v", r)
	}
	if !strings.HasPrefix(r.ReplayKey(), "sha256:") {
		t.Errorf("replay key of an id-less request = %q", r.ReplayKey())
	}
	r2, _ := Decode([]byte(`{"time":"` + exampleTime + `","pipeline":[["id"]]}`))
	if r2.ID == r.ID {
		t.Error("two id-less requests got the same id")
	}
	if r2.ReplayKey() != r.ReplayKey() {
		t.Error("the same id-less line gave different replay keys")
	}
}

func TestDecodeExtensions(t *testing.T) {
	r, err := Decode(line(t, map[string]any{
		"action": "exec", "cwd": "/tmp", "stdin": "aGVsbG8=", "timeout": 2.5, "version": "1.0",
		"privileged": false, "forward_agent": true, "eof_withdraws": true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Cwd != "/tmp" || string(r.Stdin) != "hello" || r.Timeout != 2500*time.Millisecond || r.Version != "1.0" || !r.ForwardAgent || r.Privileged || !r.EOFWithdraws {
		t.Fatalf("extensions decoded wrongly: %+v", r)
	}
	p, err := Decode([]byte(`{"action":"ping","time":"` + exampleTime + `"}`))
	if err != nil || p.Action != ActionPing {
		t.Fatalf("ping without pipeline: %v %+v", err, p)
	}
	if _, err := Decode([]byte(`{"action":"ping","time":"` + exampleTime + `","pipeline":[]}`)); err != nil {
		t.Fatalf("ping with empty pipeline: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	long := strings.Repeat("x", 129)
	for _, tc := range []struct {
		name string
		line string
		want string
	}{
		{"not json", `{"time":`, "invalid JSON: unexpected end of input"},
		{"garbage", `hello`, "invalid JSON: invalid character 'h' looking for beginning of value"},
		{"array", `[1]`, "invalid JSON: request must be a JSON object"},
		{"trailing", `{"time":"x"} {}`, "invalid JSON: data after the request object"},
		{"trailing garbage", `{"time":"x"} x`, "invalid JSON: data after the request object"},
		{"trailing nul", "{\"time\":\"x\"}\x00", "invalid JSON: data after the request object"},
		{"syntax error after a type error", `{"privileged":1,"x":0x10}`, "invalid JSON: invalid character 'x' after object key:value pair"},
		{"timeout out of range", `{"timeout":1e400}`, `field "timeout" must be a positive number of seconds`},
		{"invalid utf8", "{\"time\":\"\xff\"}", "invalid JSON: request is not valid UTF-8"},
		{"unknown field", `{"time":"x","pipeline":[["a"]],"user":"root"}`, `unknown field "user"`},
		{"duplicate field", `{"time":"x","pipeline":[["a"]],"privileged":false,"privileged":true}`, `duplicate field "privileged"`},
		{"null", `{"time":"x","pipeline":[["a"]],"env":null}`, `field "env" must not be null`},
		{"pipeline type", `{"time":"x","pipeline":"ls"}`, `field "pipeline" must be an array of arrays of strings`},
		{"pipeline null arg", `{"time":"x","pipeline":[["ls",null]]}`, `field "pipeline" must be an array of arrays of strings`},
		{"pipeline null stage", `{"time":"x","pipeline":[null]}`, `field "pipeline" must be an array of arrays of strings`},
		{"pipeline number", `{"time":"x","pipeline":[["ls",1]]}`, `field "pipeline" must be an array of arrays of strings`},
		{"privileged type", `{"time":"x","pipeline":[["a"]],"privileged":"yes"}`, `field "privileged" must be a boolean`},
		{"forward_agent type", `{"time":"x","pipeline":[["a"]],"forward_agent":1}`, `field "forward_agent" must be a boolean`},
		{"eof_withdraws type", `{"time":"x","pipeline":[["a"]],"eof_withdraws":"true"}`, `field "eof_withdraws" must be a boolean`},
		{"id type", `{"time":"x","pipeline":[["a"]],"id":5}`, `field "id" must be a string`},
		{"time type", `{"time":5,"pipeline":[["a"]]}`, `field "time" must be a string`},
		{"env type", `{"time":"x","pipeline":[["a"]],"env":{"A":1}}`, `field "env" must be an object of strings`},
		{"env null value", `{"time":"x","pipeline":[["a"]],"env":{"A":null}}`, `field "env" must be an object of strings`},
		{"stdin", `{"time":"x","pipeline":[["a"]],"stdin":"***"}`, `field "stdin" must be base64`},
		{"timeout type", `{"time":"x","pipeline":[["a"]],"timeout":"5"}`, `field "timeout" must be a number of seconds`},
		{"timeout zero", `{"time":"x","pipeline":[["a"]],"timeout":0}`, `field "timeout" must be a positive number of seconds`},
		{"timeout negative", `{"time":"x","pipeline":[["a"]],"timeout":-1}`, `field "timeout" must be a positive number of seconds`},
		{"timeout huge", `{"time":"x","pipeline":[["a"]],"timeout":1e300}`, `field "timeout" must be a positive number of seconds`},
		{"action", `{"time":"x","pipeline":[["a"]],"action":"shell"}`, `field "action" must be "exec" or "ping"`},
		{"no pipeline", `{"time":"x"}`, `missing field "pipeline"`},
		{"empty pipeline", `{"time":"x","pipeline":[]}`, "pipeline must have 1 to 16 stages"},
		{"17 stages", `{"time":"x","pipeline":[` + strings.TrimSuffix(strings.Repeat(`["a"],`, 17), ",") + `]}`, "pipeline must have 1 to 16 stages"},
		{"empty stage", `{"time":"x","pipeline":[["a"],[]]}`, "pipeline[1] must not be empty"},
		{"empty argv0", `{"time":"x","pipeline":[[""]]}`, "pipeline[0][0] must not be empty"},
		{"nul", `{"time":"x","pipeline":[["a","b","c\u0000"]]}`, "pipeline[0][2] contains a control or bidi character"},
		{"escape", `{"time":"x","pipeline":[["a","\u001b[2J"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"cr", `{"time":"x","pipeline":[["a","x\ry"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"c1", `{"time":"x","pipeline":[["a","\u009b2J"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"del", `{"time":"x","pipeline":[["a","\u007f"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"bidi", `{"time":"x","pipeline":[["a","\u202e"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"isolate", `{"time":"x","pipeline":[["a","\u2066"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"zero width", `{"time":"x","pipeline":[["a","\u200b"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"bom", `{"time":"x","pipeline":[["a","\ufeff"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"word joiner", `{"time":"x","pipeline":[["a","\u2060"]]}`, "pipeline[0][1] contains a control or bidi character"},
		{"id empty", `{"time":"x","pipeline":[["a"]],"id":""}`, "id must be 1 to 128 characters"},
		{"id long", `{"time":"x","pipeline":[["a"]],"id":"` + long + `"}`, "id must be 1 to 128 characters"},
		{"id newline", `{"time":"x","pipeline":[["a"]],"id":"a\nb"}`, "id contains a control or bidi character"},
		{"host long", `{"time":"x","pipeline":[["a"]],"host":"` + strings.Repeat("h", 256) + `"}`, "host exceeds 255 characters"},
		{"host tab", `{"time":"x","pipeline":[["a"]],"host":"a\tb"}`, "host contains a control or bidi character"},
		{"session long", `{"time":"x","pipeline":[["a"]],"session":"` + strings.Repeat("s", 257) + `"}`, "session exceeds 256 characters"},
		{"session bidi", `{"time":"x","pipeline":[["a"]],"session":"\u202d"}`, "session contains a control or bidi character"},
		{"reason long", `{"time":"x","pipeline":[["a"]],"reason":"` + strings.Repeat("r", 4097) + `"}`, "reason exceeds 4096 characters"},
		{"reason cr", `{"time":"x","pipeline":[["a"]],"reason":"a\rb"}`, "reason contains a control or bidi character"},
		{"version esc", `{"time":"x","pipeline":[["a"]],"version":"\u001b"}`, "version contains a control or bidi character"},
		{"cwd relative", `{"time":"x","pipeline":[["a"]],"cwd":"tmp"}`, "cwd must be an absolute path"},
		{"cwd newline", `{"time":"x","pipeline":[["a"]],"cwd":"/a\nb"}`, "cwd contains a control or bidi character"},
		{"env key", `{"time":"x","pipeline":[["a"]],"env":{"1A":"x"}}`, `env key "1A" is not a valid name`},
		{"env key dash", `{"time":"x","pipeline":[["a"]],"env":{"A-B":"x"}}`, `env key "A-B" is not a valid name`},
		{"env value", `{"time":"x","pipeline":[["a"]],"env":{"TERM":"a\nb"}}`, `env["TERM"] contains a control or bidi character`},
		{"agent privileged default", `{"time":"x","pipeline":[["a"]],"forward_agent":true}`, `forward_agent requires "privileged": false`},
		{"agent privileged true", `{"time":"x","pipeline":[["a"]],"forward_agent":true,"privileged":true}`, `forward_agent requires "privileged": false`},
		{"run_as type", `{"time":"x","pipeline":[["a"]],"run_as":108}`, `field "run_as" must be a string`},
		{"run_as empty", `{"time":"x","pipeline":[["a"]],"run_as":""}`, `run_as must not be empty`},
		{"run_as long", `{"time":"x","pipeline":[["a"]],"run_as":"` + strings.Repeat("u", 257) + `"}`, `run_as exceeds 256 characters`},
		{"run_as newline", `{"time":"x","pipeline":[["a"]],"run_as":"a\nb"}`, `run_as contains a control or bidi character`},
		{"run_as space", `{"time":"x","pipeline":[["a"]],"run_as":"a b"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as option", `{"time":"x","pipeline":[["a"]],"run_as":"-u"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as slash", `{"time":"x","pipeline":[["a"]],"run_as":"../root"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as digits", `{"time":"x","pipeline":[["a"]],"run_as":"1001"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as uid -1", `{"time":"x","pipeline":[["a"]],"run_as":"#4294967295"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as uid sign", `{"time":"x","pipeline":[["a"]],"run_as":"#+5"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as uid zero", `{"time":"x","pipeline":[["a"]],"run_as":"#01"}`, `run_as must be a user name or "#UID" (a number)`},
		{"run_as_group bad", `{"time":"x","pipeline":[["a"]],"run_as_group":"a:b"}`, `run_as_group must be a group name or "#GID" (a number)`},
		{"run_as unprivileged", `{"time":"x","pipeline":[["a"]],"run_as":"postgres","privileged":false}`, `run_as needs "privileged": true: a request with "privileged": false runs as its requester`},
		{"run_as_group unprivileged", `{"time":"x","pipeline":[["a"]],"run_as_group":"staff","privileged":false}`, `run_as_group needs "privileged": true: a request with "privileged": false runs as its requester`},
		{"run_as with agent", `{"time":"x","pipeline":[["a"]],"run_as":"postgres","privileged":false,"forward_agent":true}`, `run_as needs "privileged": true: a request with "privileged": false runs as its requester`},
		{"run_as with agent privileged", `{"time":"x","pipeline":[["a"]],"run_as":"postgres","forward_agent":true}`, `forward_agent requires "privileged": false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.line))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Decode(%s) error = %v, want %q", tc.line, err, tc.want)
			}
		})
	}
}

// TestDecodeRunAs: run_as and run_as_group decode as sent, names and
// "#ID" forms, and leave a request without them running as root.
func TestDecodeRunAs(t *testing.T) {
	for _, tc := range []struct{ user, group string }{
		{"postgres", ""}, {"www-data", "staff"}, {"#108", "#0"}, {"svc.deploy", ""}, {"HOST$", "_grp"}, {"root", ""},
	} {
		fields := map[string]any{"privileged": true}
		if tc.user != "" {
			fields["run_as"] = tc.user
		}
		if tc.group != "" {
			fields["run_as_group"] = tc.group
		}
		r, err := Decode(line(t, fields))
		if err != nil {
			t.Fatalf("run_as %q run_as_group %q: %v", tc.user, tc.group, err)
		}
		if r.RunAs != tc.user || r.RunAsGroup != tc.group || !r.Privileged {
			t.Fatalf("run_as %q run_as_group %q decoded as %q %q", tc.user, tc.group, r.RunAs, r.RunAsGroup)
		}
	}
	if id, err := ParseAccountID("4294967294"); err != nil || id != 4294967294 {
		t.Fatalf("ParseAccountID(4294967294) = %d, %v", id, err)
	}
}

func TestDecodeAllowsTabAndNewlineInArgvAndReason(t *testing.T) {
	r, err := Decode([]byte(`{"time":"x","pipeline":[["sh","-c","echo a\n\techo b"]],"reason":"two\nlines\tok"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Pipeline[0][2] != "echo a\n\techo b" || r.Reason != "two\nlines\tok" {
		t.Fatalf("got %+v", r)
	}
}

func TestDecodeEchoesValidIDOnError(t *testing.T) {
	r, err := Decode([]byte(`{"id":"abc","time":"x","pipeline":[]}`))
	if err == nil || r == nil || r.ID != "abc" {
		t.Fatalf("want the id echoed with the error, got %v %+v", err, r)
	}
	r, err = Decode([]byte(`{"id":"a\u001bb","time":"x","pipeline":[["a"]]}`))
	if err == nil || r == nil || r.ID != "" {
		t.Fatalf("an invalid id must not be echoed, got %v %+v", err, r)
	}
}

func TestCheckTime(t *testing.T) {
	now := time.Date(2026, 2, 13, 14, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		time string
		want string
	}{
		{"2026-02-13T14:30:00Z", ""},
		{"2026-02-13T14:29:00.5Z", ""},
		{"2026-02-13T14:30:59.999999999Z", ""},
		{"2026-02-13T15:30:30+01:00", ""},
		{"2026-02-13T09:30:30-05:00", ""},
		{"2026-02-13T14:28:45Z", "request too old: 75s (max 60s)"},
		{"2026-02-13T14:28:59.5Z", "request too old: 61s (max 60s)"},
		{"2026-02-13T14:32:00Z", "request time is in the future: 120s ahead (max 60s)"},
		{"2026-02-13T15:32:00+01:00", "request time is in the future: 120s ahead (max 60s)"},
		{"2026-02-13T14:30:00", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13T14:30:00"`},
		{"yesterday", `field "time" must be an RFC 3339 date-time with a zone, got "yesterday"`},
		{"", `missing field "time"`},
	} {
		r := &Request{TimeText: tc.time}
		err := r.CheckTime(now, time.Minute)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckTime(%q) = %q, want %q", tc.time, got, tc.want)
		}
	}
}

func TestEnvPolicy(t *testing.T) {
	p := EnvPolicy(defaultEnvAllow)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LANG": "C", "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive", "http_proxy": "http://proxy:3128"}, ""},
		{map[string]string{"LANG": "C", "DEBIAN_FRONTEND": "web"}, `env "DEBIAN_FRONTEND" must be one of "noninteractive", "readline", "teletype", "text", "dialog", "editor"`},
		{map[string]string{"FOO": "x"}, `env key "FOO" is not allowed`},
		{map[string]string{"PATH": "/tmp"}, `env key "PATH" is not allowed`},
		{map[string]string{"LD_PRELOAD": "/tmp/x.so"}, `env key "LD_PRELOAD" is not allowed`},
		{map[string]string{"SSH_AUTH_SOCK": "/tmp/a"}, "SSH_AUTH_SOCK cannot be set; use forward_agent"},
		{map[string]string{"LANG": "C", "BASH_ENV": "x", "ZZZ": "y"}, `env key "BASH_ENV" is not allowed`},
	} {
		err := p.Check(tc.env)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Check(%v) = %q, want %q", tc.env, got, tc.want)
		}
	}
	// A configured allowlist cannot let the never-allowed keys through.
	wide := EnvPolicy{"*"}
	for _, k := range []string{"PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "IFS", "BASH_ENV", "ENV"} {
		if err := wide.Check(map[string]string{k: "x"}); err == nil {
			t.Errorf("allowlist * let %s through", k)
		}
	}
	// Nor a key the package has no value rule for.
	if err := wide.Check(map[string]string{"FOO": "x"}); err == nil || err.Error() != `env key "FOO" is not allowed` {
		t.Errorf("allowlist * let FOO through: %v", err)
	}
	if err := wide.Check(map[string]string{"LANG": "C"}); err != nil {
		t.Errorf("allowlist * refused LANG: %v", err)
	}
}

func TestReadLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
		err  error
	}{
		{"line", "abc\n", "abc", nil},
		{"trailing bytes ignored", "abc\ndef", "abc", nil},
		{"empty", "", "", io.EOF},
		{"no newline", "abc", "", ErrNoNewline},
		{"exactly max", strings.Repeat("a", MaxLine-1) + "\n", strings.Repeat("a", MaxLine-1), nil},
		{"one over", strings.Repeat("a", MaxLine) + "\n", "", ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadLine(iotest.OneByteReader(strings.NewReader(tc.in)))
			if tc.name == "exactly max" || tc.name == "one over" {
				got, err = ReadLine(strings.NewReader(tc.in)) // one byte at a time is slow
			}
			if !errors.Is(err, tc.err) || string(got) != tc.want {
				t.Fatalf("ReadLine = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// countingReader counts the bytes read from an endless stream.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	c.n += int64(len(p))
	return len(p), nil
}

func TestReadLineStopsAtLimit(t *testing.T) {
	var c countingReader
	if _, err := ReadLine(&c); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
	if c.n > MaxLine {
		t.Fatalf("read %d bytes of an endless line; the limit is %d", c.n, MaxLine)
	}
}

func TestWriteResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Response
		want string
	}{
		{"ok", Response{ID: "i", Status: StatusOK, Stages: []StageResult{{ExitCode: 0, Stderr: []byte("e")}}, Stdout: []byte("out"), Version: "v"},
			`{"id":"i","status":"ok","stages":[{"exit_code":0,"stderr":"ZQ=="}],"stdout":"b3V0","version":"v"}`},
		{"ok empty output", Response{ID: "i", Status: StatusOK, Stages: []StageResult{{}}, Version: "v"},
			`{"id":"i","status":"ok","stages":[{"exit_code":0,"stderr":""}],"stdout":"","version":"v"}`},
		{"truncated and signal", Response{ID: "i", Status: StatusOK, Stages: []StageResult{{ExitCode: 0}, {ExitCode: 137, Signal: "SIGKILL", Stderr: []byte{0xff}, StderrTruncated: true}}, Stdout: []byte{0}, StdoutTruncated: true, Version: "v"},
			`{"id":"i","status":"ok","stages":[{"exit_code":0,"stderr":""},{"exit_code":137,"signal":"SIGKILL","stderr":"/w==","stderr_truncated":true}],"stdout":"AA==","stdout_truncated":true,"version":"v"}`},
		{"usage", Response{ID: "i", Status: StatusOK, Stages: []StageResult{{}}, Usage: &Usage{CPUUsec: 3, UserUsec: 2, SystemUsec: 1}, Version: "v"},
			`{"id":"i","status":"ok","stages":[{"exit_code":0,"stderr":""}],"stdout":"","usage":{"cpu_usec":3,"user_usec":2,"system_usec":1},"version":"v"}`},
		{"usage with memory", Response{ID: "i", Status: StatusOK, Stages: []StageResult{{}}, Usage: &Usage{CPUUsec: 3, MemoryPeak: new(int64(4096))}, Version: "v"},
			`{"id":"i","status":"ok","stages":[{"exit_code":0,"stderr":""}],"stdout":"","usage":{"cpu_usec":3,"user_usec":0,"system_usec":0,"memory_peak":4096},"version":"v"}`},
		{"denied", Response{ID: "i", Status: StatusDenied, Message: "denied by operator root on pts/3", Version: "v"},
			`{"id":"i","status":"denied","message":"denied by operator root on pts/3","version":"v"}`},
		{"pong", Response{ID: "i", Status: StatusOK, Message: "pong", Approver: new(bool), Version: "v"},
			`{"id":"i","status":"ok","message":"pong","approver":false,"version":"v"}`},
		{"unread", Response{Status: StatusError, Message: "request missing trailing newline", Version: "v"},
			`{"id":"","status":"error","message":"request missing trailing newline","version":"v"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteResponse(&b, &tc.r); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want+"\n" {
				t.Fatalf("got  %s\nwant %s", b.String(), tc.want)
			}
			var back Response
			if err := json.Unmarshal(b.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Stdout, tc.r.Stdout) || back.Status != tc.r.Status || back.Message != tc.r.Message || len(back.Stages) != len(tc.r.Stages) || (back.Usage == nil) != (tc.r.Usage == nil) {
				t.Fatalf("round trip: %+v", back)
			}
		})
	}
}

func TestWriteResponseLarge(t *testing.T) {
	out := bytes.Repeat([]byte{1, 2, 3, 0xff}, 1<<20)
	var b bytes.Buffer
	if err := WriteResponse(&b, &Response{ID: "x", Status: StatusOK, Stages: []StageResult{{Stderr: out}}, Stdout: out}); err != nil {
		t.Fatal(err)
	}
	var back Response
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Stdout, out) || !bytes.Equal(back.Stages[0].Stderr, out) {
		t.Fatal("4 MiB of binary output did not round-trip")
	}
}

// TestWriteResponseChunks: output given as chunks, of sizes that split the
// base64 groups of three bytes every way (empty ones too), is written as
// one string that decodes to the chunks joined, after Stdout or Stderr.
func TestWriteResponseChunks(t *testing.T) {
	out := make([]byte, 4<<20)
	for i := range out {
		out[i] = byte(i % 253)
	}
	for _, sizes := range [][]int{
		{},
		{0},
		{1},
		{1, 1, 1, 1},
		{2, 0, 4, 3, 5},
		{3, 3, 1 << 20, 1<<20 + 1, 1<<20 + 2},
		{4<<10 - 1, 16 << 10, 64<<10 + 1, 1<<20 - 1, 1 << 20},
	} {
		var chunks [][]byte
		var want []byte
		for i, n := range sizes {
			from := len(want) + i // chunks that do not follow on in memory
			chunks = append(chunks, out[from:from+n:from+n])
			want = append(want, out[from:from+n]...)
		}
		for _, head := range [][]byte{nil, []byte("ab")} {
			r := &Response{ID: "x", Status: StatusOK, Version: "v",
				Stages: []StageResult{{Stderr: head, StderrChunks: chunks}, {Stderr: []byte("e")}},
				Stdout: head, StdoutChunks: chunks}
			var b bytes.Buffer
			if err := WriteResponse(&b, r); err != nil {
				t.Fatal(err)
			}
			var back Response
			if err := json.Unmarshal(b.Bytes(), &back); err != nil {
				t.Fatalf("chunks %v after %q: %v", sizes, head, err)
			}
			full := append(slices.Clip(head), want...)
			if !bytes.Equal(back.Stdout, full) || !bytes.Equal(back.Stages[0].Stderr, full) || string(back.Stages[1].Stderr) != "e" {
				t.Errorf("chunks %v after %q: stdout %d bytes, stderr %d bytes back; want %d equal ones", sizes, head, len(back.Stdout), len(back.Stages[0].Stderr), len(full))
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	if b, err := readGolden("request.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"time":"2026-02-13T14:30:00Z","pipeline":[["a","b"],["c"]],"env":{"LANG":"C"},"privileged":false,"forward_agent":true}`))
	f.Add([]byte(`{"time":"2026-02-13T14:30:00Z","pipeline":[["psql","-l"]],"run_as":"postgres","run_as_group":"#34"}`))
	f.Add([]byte(`{"action":"ping","time":"x"}`))
	// Look-alike names, lone surrogates and extreme times.
	for _, s := range []string{
		`{"time":"2026-02-13T14:30:00Z","pipeline":[["a"]],"privilegeD":false}`,
		`{"time":"2026-02-13T14:30:00Z","pipeline":[["a"]],"Privileged":false,"privileged":true}`,
		`{"ıd":"a","time":"2026-02-13T14:30:00Z","pipeline":[["a"]]}`,
		`{"time":"2026-02-13T14:30:00Z","pipeline":[["a"]],"forward_agent":false,"forward_agent":true}`,
		`{"time":"2026-02-13T14:30:00Z","pipeline":[["a","\ud800"]],"env":{"\u212a":"\udc00"}}`,
		`{"time":"2026-02-13T14:30:00Z","pipeline":[["a","\ud83d\ude00"]],"reason":"\\ud800"}`,
		`{"time":"0001-01-01T00:00:00Z","pipeline":[["a"]]}`,
		`{"time":"9999-12-31T23:59:59.999999999-23:59","pipeline":[["a"]]}`,
		`{"time":"2026-02-13T14:30:00,5Z","pipeline":[["a"]]}`,
		`{"time":"2026-02-13t4:30:00z","pipeline":[["a"]]}`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range deepSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r *Request
		var err error
		checkPeak(t, b, func() { r, err = Decode(b) })
		if err != nil {
			if r != nil && r.ID != "" && !termsafe.String(r.ID, false) {
				t.Fatalf("echoed an undisplayable id %q", r.ID)
			}
			return
		}
		// Whatever decodes is displayable, within limits, and consistent.
		if r.ID == "" || !termsafe.String(r.ID, false) || !termsafe.String(r.Host, false) || !termsafe.String(r.Reason, true) {
			t.Fatalf("accepted undisplayable fields: %+v", r)
		}
		if r.Action == ActionExec && (len(r.Pipeline) < 1 || len(r.Pipeline) > MaxStages) {
			t.Fatalf("accepted %d stages", len(r.Pipeline))
		}
		for _, st := range r.Pipeline {
			if len(st) == 0 || st[0] == "" {
				t.Fatalf("accepted empty stage %q", st)
			}
			for _, a := range st {
				if !termsafe.String(a, true) || strings.ContainsRune(a, 0) {
					t.Fatalf("accepted argument %q", a)
				}
			}
		}
		if r.ForwardAgent && r.Privileged {
			t.Fatal("accepted forward_agent with privileged")
		}
		// No string reads as U+FFFD unless it was sent as one (a lone
		// surrogate escape would).
		if !bytes.ContainsRune(b, utf8.RuneError) && !bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
			all := append([]string{r.ID, r.Host, r.Session, r.Reason, r.Cwd, r.Version, r.TimeText}, slices.Concat(r.Pipeline...)...)
			for k, v := range r.Env {
				all = append(all, k, v)
			}
			for _, s := range all {
				if strings.ContainsRune(s, utf8.RuneError) {
					t.Fatalf("accepted %q, which reads as U+FFFD", b)
				}
			}
		}
		// A time CheckTime takes is RFC 3339 to an independent oracle.
		if _, err := ParseTime(r.TimeText); err == nil && !rfc3339Grammar.MatchString(r.TimeText) {
			t.Fatalf("accepted time %q", r.TimeText)
		}
		// Encoding what was decoded and decoding it again gives the same.
		out := Outgoing{ID: r.ID, Host: r.Host, Session: r.Session, Time: r.TimeText, Action: r.Action,
			Pipeline: r.Pipeline, Env: r.Env, Reason: r.Reason, Privileged: &r.Privileged,
			ForwardAgent: r.ForwardAgent, Cwd: r.Cwd, Stdin: r.Stdin, Timeout: r.Timeout.Seconds(), Version: r.Version}
		b2, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Decode(b2)
		if err != nil {
			t.Fatalf("re-encoded request %s fails: %v", b2, err)
		}
		if r2.ID != r.ID || r2.Reason != r.Reason || r2.Privileged != r.Privileged || len(r2.Pipeline) != len(r.Pipeline) {
			t.Fatalf("round trip changed the request: %+v vs %+v", r, r2)
		}
	})
}
