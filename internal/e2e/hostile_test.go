package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/wire"
)

// hostileCase is one malformed (or boundary) request and the answer it
// must get: an error whose message is want (or starts with it, with
// prefix), or, with want == "", an ok.
type hostileCase struct {
	name   string
	raw    string
	want   string
	prefix bool
}

// validFields is a valid ping's fields, as JSON values.
func validFields() map[string]string {
	return map[string]string{
		"id":       strconv.Quote(uuid.NewString()),
		"time":     strconv.Quote(time.Now().UTC().Format(time.RFC3339Nano)),
		"action":   `"ping"`,
		"pipeline": `[["true"]]`,
	}
}

// line joins fields (JSON texts) into a request line in a fixed order.
func line(fields map[string]string) string {
	var b strings.Builder
	b.WriteString("{")
	first := true
	for _, k := range []string{"id", "host", "session", "time", "pipeline", "env", "reason", "privileged", "forward_agent", "action", "cwd", "stdin", "timeout", "version"} {
		v, ok := fields[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString(strconv.Quote(k) + ":" + v)
	}
	return b.String() + "}\n"
}

// with returns a valid ping's line with field k set to the JSON text v
// ("" deletes it).
func with(k, v string) string {
	f := validFields()
	if v == "" {
		delete(f, k)
	} else {
		f[k] = v
	}
	return line(f)
}

// fieldType is the type error of each request field.
var fieldType = map[string]string{
	"id": "must be a string", "host": "must be a string", "session": "must be a string",
	"time": "must be a string", "reason": "must be a string", "cwd": "must be a string",
	"version": "must be a string", "action": "must be a string", "stdin": "must be a string",
	"privileged": "must be a boolean", "forward_agent": "must be a boolean",
	"pipeline": "must be an array of arrays of strings", "env": "must be an object of strings",
	"timeout": "must be a number of seconds",
}

// hostileCases builds the suite: hand-written cases and generated ones.
func hostileCases() []hostileCase {
	var cs []hostileCase
	add := func(name, raw, want string) { cs = append(cs, hostileCase{name: name, raw: raw, want: want}) }
	addPrefix := func(name, raw, want string) {
		cs = append(cs, hostileCase{name: name, raw: raw, want: want, prefix: true})
	}

	// Not JSON, not an object, not one object.
	for i, raw := range []string{"\n", " \n", "{\n", "}\n", "{{}\n", `{"a"` + "\n", `{"a":}` + "\n", "nul\n", "tru\n", "1e999\n", `{"id":"x",}` + "\n", "{'id':'x'}\n", "{id:1}\n", "\ufeff{}\n", `{"id":"\x"}` + "\n", `{"id":"\u12"}` + "\n"} {
		addPrefix(fmt.Sprintf("not json %d", i), raw, "invalid JSON: ")
	}
	for i, raw := range []string{"null\n", "1\n", "-0\n", `"s"` + "\n", "[]\n", "[{}]\n", "true\n"} {
		add(fmt.Sprintf("not an object %d", i), raw, "invalid JSON: request must be a JSON object")
	}
	add("two objects", "{} {}\n", "invalid JSON: data after the request object")
	add("object then garbage", strings.TrimSuffix(with("id", `"two-objects"`), "\n")+" x\n", "invalid JSON: data after the request object")
	add("empty object", "{}\n", `missing field "pipeline"`)

	// Invalid and truncated UTF-8, anywhere in the line.
	for i, bad := range []string{"\xe2\x82", "\xe2", "\xf0\x9f\x98", "\xff", "\xfe", "\xc0\xaf", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80", "\x80", "\xc3"} {
		add(fmt.Sprintf("bad utf8 in reason %d", i), with("reason", `"ok `+bad+`"`), wire.ErrNotUTF8.Error())
		add(fmt.Sprintf("bad utf8 in key %d", i), strings.Replace(with("id", ""), `{"time"`, `{"x`+bad+`":1,"time"`, 1), wire.ErrNotUTF8.Error())
	}
	add("bad utf8 at end", strings.TrimSuffix(with("id", ""), "\n")+"\xe2\x82\n", wire.ErrNotUTF8.Error())

	// Deep nesting.
	for _, depth := range []int{3, 10, wire.MaxDepth - 1, wire.MaxDepth, 100, 1000, 10000, 100000} {
		v := strings.Repeat("[", depth) + `"a"` + strings.Repeat("]", depth)
		obj := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
		pipeline, env := `field "pipeline" must be an array of arrays of strings`, `field "env" must be an object of strings`
		if depth+1 > wire.MaxDepth { // in the request's object
			pipeline = (&wire.DepthError{}).Error()
			env = pipeline
		}
		add(fmt.Sprintf("pipeline nested %d", depth), with("pipeline", v), pipeline)
		add(fmt.Sprintf("env nested %d", depth), with("env", obj), env)
	}

	// Huge and odd numbers.
	for _, v := range []string{"1e400", "-1e400", "0", "-0", "-1", "1e-300", "4e-10", "31536001", "1e308", "9223372036854775808"} {
		add("timeout "+v, with("timeout", v), `field "timeout" must be a positive number of seconds`)
	}
	for _, v := range []string{`"5"`, "true", "[]", "{}"} {
		add("timeout "+v, with("timeout", v), `field "timeout" must be a number of seconds`)
	}
	for _, v := range []string{"1e999", "12345678901234567890123456789", "0x10", "01", "+1", ".5", "1.", "NaN", "Infinity"} {
		if strings.ContainsAny(v[:1], "0123456789") && !strings.HasPrefix(v, "0x") && v != "01" && v != "1." { // a number
			add("privileged "+v, with("privileged", v), `field "privileged" must be a boolean`)
		} else {
			addPrefix("privileged "+v, with("privileged", v), "invalid JSON: ")
		}
	}

	// Every field given twice.
	sample := map[string]string{"host": `"h"`, "session": `"s"`, "reason": `"r"`, "cwd": `"/"`, "version": `"v"`,
		"stdin": `""`, "privileged": "true", "forward_agent": "false", "env": "{}", "timeout": "1"}
	for k := range fieldType {
		f := validFields()
		v, ok := f[k]
		if !ok {
			v = sample[k]
			f[k] = v
		}
		raw := strings.Replace(line(f), "{", "{"+strconv.Quote(k)+":"+v+",", 1)
		add("duplicate "+k, raw, fmt.Sprintf("duplicate field %q", k))
	}
	add("duplicate privileged true false", with("privileged", `true,"privileged":false`), `duplicate field "privileged"`)
	add("duplicate env key", with("env", `{"LANG":"C","LANG":"C.UTF-8"}`), `duplicate env key "LANG"`)
	add("duplicate unicode-escaped field", with("privileged", `true,"privil\u0065ged":false`), `duplicate field "privileged"`)

	// Wrong types, and null, for every field.
	for k, msg := range fieldType {
		for _, v := range []string{"1", "true", `"s"`, "[]", "{}", `[["a"]]`, "null"} {
			want := fmt.Sprintf("field %q %s", k, msg)
			if v == "null" {
				want = fmt.Sprintf("field %q must not be null", k)
			}
			switch {
			case msg == "must be a string" && v == `"s"`,
				msg == "must be a boolean" && v == "true",
				k == "pipeline" && (v == "[]" || v == `[["a"]]`),
				k == "env" && v == "{}",
				k == "timeout" && v == "1":
				continue // the right type
			}
			add(fmt.Sprintf("type %s=%s", k, v), with(k, v), want)
		}
	}
	add("pipeline of numbers", with("pipeline", "[[1]]"), `field "pipeline" must be an array of arrays of strings`)
	add("pipeline with null argv", with("pipeline", "[null]"), `field "pipeline" must be an array of arrays of strings`)
	add("pipeline with null arg", with("pipeline", `[["a",null]]`), `field "pipeline" must be an array of arrays of strings`)
	add("env of numbers", with("env", `{"LANG":1}`), `field "env" must be an object of strings`)
	add("env null value", with("env", `{"LANG":null}`), `field "env" must be an object of strings`)

	// NULs: escaped, in each displayed field; raw, anywhere.
	for _, k := range []string{"host", "session", "reason", "version", "cwd"} {
		add("nul in "+k, with(k, `"a\u0000b"`), k+" contains a control or bidi character")
	}
	add("nul in id", with("id", `"a\u0000b"`), "id contains a control or bidi character")
	add("nul in argv0", with("pipeline", `[["tr\u0000ue"]]`), "pipeline[0][0] contains a control or bidi character")
	add("nul in arg", with("pipeline", `[["echo","x","\u0000"]]`), "pipeline[0][2] contains a control or bidi character")
	add("nul in env value", with("env", `{"LANG":"C\u0000"}`), `env["LANG"] contains a control or bidi character`)
	add("nul in env key", with("env", `{"LA\u0000NG":"C"}`), `env key "LA\x00NG" is not a valid name`)
	add("nul in time", with("time", `"\u0000"`), `field "time" must be an RFC 3339 date-time with a zone, got "\x00"`)
	add("nul in action", with("action", `"ping\u0000"`), `field "action" must be "exec" or "ping"`)
	add("nul in stdin", with("stdin", `"\u0000"`), `field "stdin" must be base64`)
	add("nul in field name", with("id", "")[:1]+`"i\u0000d":"x",`+with("id", "")[1:], `unknown field "i\x00d"`)
	for i, at := range []string{`{"id":"a` + "\x00" + `b"}`, "\x00{}", "{}\x00", `{"id":"x"` + "\x00" + `}`} {
		addPrefix(fmt.Sprintf("raw nul %d", i), at+"\n", "invalid JSON: ")
	}
	// Other controls, bidi and other invisible or format characters, and
	// separators that look like a space (internal/termsafe).
	for i, c := range []string{`\u001b[2J`, `\u0007`, `\r`, `\u007f`, `\u0085`, `\u009b`, `\u200b`, `\u200f`, `\u202e`, `\u2066`, `\u2069`, `\ufeff`, `\u2060`,
		`\u200d`, `\u00ad`, `\u061c`, `\u2028`, `\u00a0`, `\u3000`, `\ue000`, `\udb40\udc41`,
		`\u2800`, `\ud834\udd59`, `\ud81b\udfe4`} { // and those drawn as a blank
		add(fmt.Sprintf("control in host %d", i), with("host", `"a`+c+`"`), "host contains a control or bidi character")
		add(fmt.Sprintf("control in argv %d", i), with("pipeline", `[["echo","`+c+`"]]`), "pipeline[0][1] contains a control or bidi character")
	}

	// Every length limit, at the limit (answered pong) and one past it.
	type limit struct {
		field string
		max   int
		msg   string
	}
	for _, l := range []limit{
		{"id", wire.MaxIDLen, "id must be 1 to 128 characters"},
		{"host", wire.MaxHostLen, "host exceeds 255 characters"},
		{"session", wire.MaxSessionLen, "session exceeds 256 characters"},
		{"reason", wire.MaxReasonLen, "reason exceeds 4096 characters"},
		{"version", wire.MaxVersionLen, "version exceeds 256 characters"},
	} {
		for _, ch := range []string{"a", "é", "😀"} { // characters, not bytes
			at := strings.Repeat(ch, l.max)
			if l.field == "id" {
				at = uuid.NewString()[:8] + strings.Repeat(ch, l.max-8)
			}
			add(fmt.Sprintf("%s %d %s", l.field, l.max, ch), with(l.field, strconv.Quote(at)), "")
			add(fmt.Sprintf("%s %d %s", l.field, l.max+1, ch), with(l.field, strconv.Quote(at+ch)), l.msg)
		}
	}
	add("id empty", with("id", `""`), "id must be 1 to 128 characters")
	add("id 1", with("id", strconv.Quote("1"+uuid.NewString()[:0]+fmt.Sprint(time.Now().UnixNano()))), "")
	cwdAt := "/" + strings.Repeat("a", 4095)
	add("cwd 4097", with("cwd", strconv.Quote(cwdAt+"a")), "cwd exceeds 4096 characters")
	add("cwd relative", with("cwd", `"tmp"`), "cwd must be an absolute path")
	add("cwd empty", with("cwd", `""`), "cwd must be an absolute path")
	stages := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = `["true"]`
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	add("16 stages", with("pipeline", stages(16)), "")
	add("17 stages", with("pipeline", stages(17)), "pipeline must have 1 to 16 stages")
	add("1000 stages", with("pipeline", stages(1000)), "pipeline must have 1 to 16 stages")
	add("0 stages exec", with("action", "")[:0]+line(map[string]string{"time": validFields()["time"], "pipeline": "[]"}), "pipeline must have 1 to 16 stages")
	add("empty argv (PwnKit)", with("pipeline", `[[]]`), "pipeline[0] must not be empty")
	add("empty argv", with("pipeline", `[["a"],[]]`), "pipeline[1] must not be empty")
	add("empty argv0", with("pipeline", `[[""]]`), "pipeline[0][0] must not be empty")
	add("argv0 only spaces", with("action", "")[:0]+line(map[string]string{"time": validFields()["time"], "id": strconv.Quote(uuid.NewString()), "pipeline": `[["   "]]`}), `stage 1: executable not found: "   "`)
	// The line itself: at 1 MiB, newline included, and one byte more.
	pad := func(total int) string {
		f := validFields()
		f["stdin"] = `""`
		base := len(line(f))
		n := total - base // bytes of base64 to add
		n -= n % 4
		f["stdin"] = strconv.Quote(strings.Repeat("A", n))
		l := line(f)
		// Make up the rest with whitespace before the closing brace.
		return strings.TrimSuffix(l, "}\n") + strings.Repeat(" ", total-len(l)) + "}\n"
	}
	exact := pad(wire.MaxLine)
	if len(exact) != wire.MaxLine {
		panic(fmt.Sprintf("padded line is %d bytes", len(exact)))
	}
	add("line at 1 MiB", exact, "")
	// One line made once: each with() has its own time, whose length
	// varies with its digits.
	noID := with("id", "")
	add("line 1 MiB + 1", strings.Repeat(" ", wire.MaxLine-len(noID))+noID[:len(noID)-1]+" \n", wire.ErrTooLarge.Error())
	add("line 2 MiB", strings.Repeat("x", 2*wire.MaxLine)+"\n", wire.ErrTooLarge.Error())

	// Time and freshness.
	for _, v := range []string{`""`, `"now"`, `"2026-02-13T14:30:00"`, `"2026-02-13 14:30:00Z"`, `"2026-13-13T14:30:00Z"`, `"1"`, `"9999-99-99T99:99:99Z"`} {
		add("time "+v, with("time", v), fmt.Sprintf("field \"time\" must be an RFC 3339 date-time with a zone, got %s", v))
	}
	add("time missing", with("time", ""), `missing field "time"`)
	// "" is a missing time for CheckTime's purposes.
	cs[len(cs)-8].want = `missing field "time"`
	// Not ±61 s: the cases are built a second or two before they are sent.
	for _, d := range []time.Duration{-61 * time.Second, -70 * time.Second, -time.Hour, -24 * 365 * time.Hour} {
		addPrefix(fmt.Sprintf("time %v", d), with("time", strconv.Quote(time.Now().Add(d).UTC().Format(time.RFC3339))), "request too old: ")
		if d != -61*time.Second {
			addPrefix(fmt.Sprintf("time +%v", -d), with("time", strconv.Quote(time.Now().Add(-d).UTC().Format(time.RFC3339))), "request time is in the future: ")
		}
	}
	add("time -50s", with("time", strconv.Quote(time.Now().Add(-50*time.Second).UTC().Format(time.RFC3339))), "")
	add("time +50s zone", with("time", strconv.Quote(time.Now().Add(50*time.Second).In(time.FixedZone("", 5*3600+1800)).Format(time.RFC3339))), "")

	// Unknown fields, env rules, forward_agent, stdin.
	for _, k := range []string{"user", "uid", "Privileged", "PIPELINE", "privileged ", "", "__proto__", "pipeline\u0000"} {
		q, _ := json.Marshal(k)
		add("unknown "+strconv.Quote(k), strings.Replace(with("id", ""), "{", "{"+string(q)+":1,", 1), fmt.Sprintf("unknown field %q", k))
	}
	for _, k := range []string{"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "IFS", "BASH_ENV", "ENV", "FOO", "lang", "LC"} {
		add("env "+k, with("env", `{"`+k+`":"x"}`), fmt.Sprintf("env key %q is not allowed", k))
	}
	add("env SSH_AUTH_SOCK", with("env", `{"SSH_AUTH_SOCK":"/x"}`), "SSH_AUTH_SOCK cannot be set; use forward_agent")
	for _, k := range []string{"1A", "A-B", "A B", "", "A=B", "é"} {
		add("env key "+strconv.Quote(k), with("env", `{`+strconv.Quote(k)+`:"x"}`), fmt.Sprintf("env key %q is not a valid name", k))
	}
	add("env allowed", with("env", `{"LANG":"C","LC_ALL":"C","TZ":"UTC"}`), "")
	add("forward_agent privileged", with("forward_agent", "true"), `forward_agent requires "privileged": false`)
	add("forward_agent privileged true", with("forward_agent", `true,"privileged":true`), `forward_agent requires "privileged": false`)
	for _, v := range []string{`"!"`, `"AAA"`, `"A==="`, `"YQ"`, `"YQ=\n"`, `"Y Q=="`} {
		add("stdin "+v, with("stdin", v), `field "stdin" must be base64`)
	}
	add("stdin ok", with("stdin", strconv.Quote(base64.StdEncoding.EncodeToString([]byte("hi\x00\xff")))), "")
	for _, v := range []string{`"EXEC"`, `"run"`, `""`, `"ping "`} {
		add("action "+v, with("action", v), `field "action" must be "exec" or "ping"`)
	}

	// Generated: a valid request cut short at every byte.
	// Fixed fields, so the number of cases does not vary with the clock.
	full := strings.TrimSuffix(line(map[string]string{"id": `"cut-550e8400"`, "time": `"2026-02-13T14:30:00.5Z"`,
		"pipeline": `[["true"]]`, "reason": `"cut \"here\" é"`, "action": `"ping"`}), "\n")
	for i := 1; i < len(full); i++ {
		raw := full[:i] + "\n"
		if !strings.HasPrefix(raw, "{") {
			continue
		}
		want := "invalid JSON: "
		if !isValidUTF8(full[:i]) {
			want = wire.ErrNotUTF8.Error()
		}
		cs = append(cs, hostileCase{name: fmt.Sprintf("cut at %d", i), raw: raw, want: want, prefix: want == "invalid JSON: "})
	}
	return cs
}

func isValidUTF8(s string) bool {
	return json.Valid([]byte(strconv.Quote(s))) && strings.ToValidUTF8(s, "\uFFFD") == s
}

// sendHostile sends raw on a fresh connection and reads the answer. Unlike
// sendRaw, it keeps going when the daemon stops reading (an oversize line).
func sendHostile(t *testing.T, d *daemonProc, raw string) response {
	t.Helper()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte(raw)); err == nil {
		c.(*net.UnixConn).CloseWrite()
	}
	return readResponse(t, c)
}

// procStats reads a process's descriptor count, threads and resident set.
func procStats(t testing.TB, pid int) (fds, threads, rssKB int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		n, _ := strconv.Atoi(strings.Fields(v + " 0")[0])
		switch k {
		case "Threads":
			threads = n
		case "VmRSS":
			rssKB = n
		}
	}
	return fdCount(t, pid), threads, rssKB
}

// TestHostileInputs throws a few hundred malformed and boundary requests
// at a live daemon, each on its own connection, and checks each answer and
// that the daemon still serves; at the end its descriptors, threads and
// memory must be back where they were.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	pid := d.Cmd.Process.Pid
	cases := hostileCases()
	seen := map[string]bool{}
	var names []string
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("case %q twice", c.name)
		}
		seen[c.name] = true
		names = append(names, c.name)
	}
	if len(cases) < 200 {
		t.Fatalf("only %d cases", len(cases))
	}
	// Warm up: the first requests grow the daemon's pools and stacks.
	for range 20 {
		d.alive()
	}
	fds0, threads0, rss0 := procStats(t, pid)
	for range 2 {
		// Fresh ids and times each round, and whenever the cases have aged:
		// on a loaded machine sending them all takes longer than the
		// margins of the time cases (10 s either side of --max-skew).
		var byName map[string]hostileCase
		var built time.Time
		for i, name := range names {
			if time.Since(built) > 2*time.Second {
				byName, built = map[string]hostileCase{}, time.Now()
				for _, c := range hostileCases() {
					byName[c.name] = c
				}
			}
			c := byName[name]
			r := sendHostile(t, d, c.raw)
			switch {
			case c.want == "":
				if r.Status != wire.StatusOK {
					t.Errorf("%s: got %s, want ok", c.name, strings.TrimSpace(r.raw))
				}
			case r.Status != wire.StatusError,
				c.prefix && !strings.HasPrefix(r.Message, c.want),
				!c.prefix && r.Message != c.want:
				t.Errorf("%s: got %.300s, want error %q (prefix %v)", c.name, strings.TrimSpace(r.raw), c.want, c.prefix)
			}
			// Every refusal here is the client's doing: a code of the
			// protocol, of status error, never internal; a line that is not
			// JSON is invalid_json.
			if status, ok := wire.CodeStatus(r.Code); c.want != "" && (!ok || status != wire.StatusError || r.Code == wire.CodeInternal ||
				strings.HasPrefix(c.want, "invalid JSON") != (r.Code == wire.CodeInvalidJSON)) {
				t.Errorf("%s: got %.300s, want a code for %q", c.name, strings.TrimSpace(r.raw), c.want)
			}
			if i%50 == 0 {
				d.alive()
			}
		}
	}
	d.alive()
	t.Logf("hostile inputs: %d cases", len(cases))
	// Descriptors and threads settle once every connection is closed.
	var fds, threads, rss int
	waitFor(t, "descriptors and threads back to their count", 10*time.Second, func() bool {
		fds, threads, rss = procStats(t, pid)
		return fds <= fds0+2 && threads <= threads0+4
	})
	t.Logf("daemon before/after: fds %d/%d, threads %d/%d, VmRSS %d/%d KiB", fds0, fds, threads0, threads, rss0, rss)
	// The 1 MiB requests pass through buffers the runtime may keep; a
	// leak per request would show as far more than this over two rounds.
	if rss > rss0+64<<10 {
		t.Errorf("VmRSS grew from %d to %d KiB", rss0, rss)
	}
}
