package e2e

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/wire"
)

// These tests send the exact bytes a requester or an approver could send
// to a real rootgated and check the daemon reads them as the contract
// (docs/protocol.md) says, not as Go's lenient JSON and time parsers would.

// TestFreshnessExtremes: a request dated anywhere RFC 3339 can write is
// judged by its true distance from now, with the documented texts; a date
// centuries ahead (where a time.Duration overflows) is refused, every time
// it is sent, not run.
func TestFreshnessExtremes(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	now := time.Now().UTC()
	tooOld := regexp.MustCompile(`^request too old: ([0-9]+)s \(max 60s\)$`)
	ahead := regexp.MustCompile(`^request time is in the future: ([0-9]+)s ahead \(max 60s\)$`)
	// about reports whether the seconds in msg are within a minute of want.
	about := func(re *regexp.Regexp, msg string, want int64) bool {
		m := re.FindStringSubmatch(msg)
		if m == nil {
			return false
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		return err == nil && n > want-60 && n < want+60
	}
	for _, tc := range []struct {
		time string
		re   *regexp.Regexp
		secs int64
	}{
		{"0001-01-01T00:00:00Z", tooOld, now.Unix() - time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()},
		{"0000-01-01T00:00:00+23:59", tooOld, now.Unix() - time.Date(-1, 12, 31, 0, 1, 0, 0, time.UTC).Unix()},
		{"9999-12-31T23:59:59Z", ahead, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix() - now.Unix()},
		{"9999-12-31T23:59:59.999999999-23:59", ahead, time.Date(10000, 1, 1, 23, 59, 0, 0, time.UTC).Unix() - now.Unix()},
		{now.AddDate(293, 0, 0).Format(time.RFC3339), ahead, now.AddDate(293, 0, 0).Unix() - now.Unix()},
		{now.Add(-90 * time.Second).Format(time.RFC3339), tooOld, 90},
		{now.Add(90 * time.Second).Format(time.RFC3339), ahead, 90},
	} {
		// With and without an id, and twice: the replay window cannot
		// be what stops it.
		for _, id := range []any{nil, "fresh-" + tc.time, nil, "fresh-" + tc.time} {
			r := d.send(map[string]any{"time": tc.time, "id": id, "pipeline": [][]string{{"echo", "ran"}}})
			if r.Status != wire.StatusError || !about(tc.re, r.Message, tc.secs) {
				t.Errorf("time %s: got %s, want %q with about %ds", tc.time, strings.TrimSpace(r.raw), tc.re, tc.secs)
			}
		}
	}
}

// TestTimeExactlyRFC3339: the daemon takes exactly RFC 3339 date-times
// (lower-case t and z included, as RFC 3339 allows) and refuses what only
// Go's time.Parse takes: a ',' before the fraction, a one-digit hour.
func TestTimeExactlyRFC3339(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	now := time.Now().UTC()
	lower := strings.ToLower(now.Format("2006-01-02T15:04:05.000Z"))
	if r := d.send(map[string]any{"time": lower, "pipeline": [][]string{{"echo", "ran"}}}); r.Status != wire.StatusOK || string(r.Stdout) != "ran\n" {
		t.Errorf("lower-case t and z: got %s, want ok", r.raw)
	}
	comma := now.Format("2006-01-02T15:04:05") + ",5Z"
	// A zone in which it is 5 o'clock now, written with a one-digit hour.
	off := 5 - now.Hour()
	local := now.In(time.FixedZone("", off*3600))
	oneDigit := local.Format("2006-01-02T") + strconv.Itoa(local.Hour()) + local.Format(":04:05-07:00")
	for _, s := range []string{comma, oneDigit, now.Format("2006-01-02 15:04:05Z")} {
		want := fmt.Sprintf("field \"time\" must be an RFC 3339 date-time with a zone, got %q", s)
		if r := d.send(map[string]any{"time": s, "pipeline": [][]string{{"echo", "ran"}}}); r.Status != wire.StatusError || r.Message != want {
			t.Errorf("got %s, want error %q", strings.TrimSpace(r.raw), want)
		}
	}
}

// TestRequestExactNames: on the request socket a key must be exactly a
// field's name, and an escaped lone surrogate in argv is refused rather
// than run as U+FFFD.
func TestRequestExactNames(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct{ line, want string }{
		{`{"time":"` + now + `","pipeline":[["echo","ran"]],"privilegeD":false}`, `unknown field "privilegeD"`},
		{`{"time":"` + now + `","pipeline":[["echo","ran"]],"Privileged":false}`, `unknown field "Privileged"`},
		{`{"ıd":"x","time":"` + now + `","pipeline":[["echo","ran"]]}`, `unknown field "ıd"`},
		{`{"time":"` + now + `","pipeline":[["echo","ran"]],"forward_agent":false,"forward_agent":false}`, `duplicate field "forward_agent"`},
		{`{"time":"` + now + `","pipeline":[["echo","\ud800"]]}`, `pipeline[0][1] contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`{"time":"` + now + `","pipeline":[["echo","a\udc00"]]}`, `pipeline[0][1] contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`{"time":"` + now + `","pipeline":[["echo","ran"]],"env":{"LANG":"\ud800"}}`, `env["LANG"] contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`{"time":"` + now + `","pipeline":[["echo","ran"]],"reason":"\ud800"}`, `reason contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
	} {
		wantError(t, d.sendRaw(tc.line+"\n"), tc.want)
	}
	// A surrogate pair is one character, and runs as sent.
	r := wantOK(t, d.sendRaw(`{"time":"`+now+`","pipeline":[["echo","\ud83d\ude00"]]}`+"\n"))
	if string(r.Stdout) != "😀\n" {
		t.Errorf("surrogate pair: %q", r.Stdout)
	}
}

// dialApprover connects to d's approver socket (as root) without a hello.
func dialApprover(t testing.TB, d *daemonProc) *rawApprover {
	t.Helper()
	var c net.Conn
	// The approver socket may come up just after the request socket.
	waitFor(t, "the approver socket", 10*time.Second, func() bool {
		var err error
		c, err = net.Dial("unix", d.asock())
		return err == nil
	})
	t.Cleanup(func() { c.Close() })
	return &rawApprover{t: t, c: c.(*net.UnixConn), r: bufio.NewReaderSize(c, 1<<20)}
}

func (a *rawApprover) sendLine(line string) {
	a.t.Helper()
	if _, err := a.c.Write([]byte(line + "\n")); err != nil {
		a.t.Fatal(err)
	}
}

// TestApproverExactNames: on the approver socket a key must be exactly a
// field's name. {"approve":false,"Approve":true} (which Go's decoder,
// matching names without regard to case, reads as an approval while a
// person reads a denial) and the other look-alikes are refused with the
// reason and the approver dropped; the request is never approved.
func TestApproverExactNames(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)

	t.Run("hello", func(t *testing.T) {
		for _, tc := range []struct{ line, want string }{
			{`{"type":"hello","Version":1,"name":"x"}`, `unknown field "Version"`},
			{`{"type":"hello","VERSION":1,"name":"x"}`, `unknown field "VERSION"`},
			{`{"tYpe":"hello","version":1,"name":"x"}`, `unknown field "tYpe"`},
			{`{"type":"hello","version":1,"Name":"x"}`, `unknown field "Name"`},
			{`{"type":"hello","version":1,"name":"x","agent_soc\u212aet":"/tmp/a"}`, "unknown field \"agent_soc\u212aet\""},
			{`{"type":"hello","version":1,"name":"\ud800"}`, `name contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		} {
			a := dialApprover(t, d)
			a.sendLine(tc.line)
			m := a.next()
			if want := "expected a hello message: bad message: " + tc.want; m.Type != remote.MsgError || m.Message != want {
				t.Errorf("%s: got %+v, want error %q", tc.line, m, want)
			}
		}
	})

	t.Run("hello name counts characters", func(t *testing.T) {
		a := dialApprover(t, d)
		a.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: strings.Repeat("é", 64)})
		if m := a.next(); m.Type != remote.MsgWelcome {
			t.Errorf("64 two-byte characters: got %+v, want welcome", m)
		}
		a.c.Close()
		b := dialApprover(t, d)
		b.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: strings.Repeat("é", 65)})
		if m := b.next(); m.Type != remote.MsgError || m.Message != "hello: name must be at most 64 displayable characters" {
			t.Errorf("65 characters: got %+v, want the name error", m)
		}
	})

	t.Run("decision", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			line, want string // line: %[1]q is the prompt's id, %[2]q its hash
		}{
			{"Approve", `{"type":"decision","id":%[1]q,"hash":%[2]q,"approve":false,"Approve":true}`, `unknown field "Approve"`},
			{"APPROVE", `{"type":"decision","id":%[1]q,"hash":%[2]q,"APPROVE":true}`, `unknown field "APPROVE"`},
			{"long s", `{"type":"decision","id":%[1]q,"haſh":%[2]q,"approve":true}`, `unknown field "haſh"`},
			{"dotless i", `{"type":"decision","ıd":%[1]q,"hash":%[2]q,"approve":true}`, `unknown field "ıd"`},
			{"Kelvin", `{"type":"decision","id":%[1]q,"hash":%[2]q,"approve":true,"agent_soc` + "\u212a" + `et":"/a"}`, "unknown field \"agent_soc\u212aet\""},
			{"surrogate", `{"type":"decision","id":%[1]q,"hash":%[2]q,"approve":true,"reason":"\ud800"}`, `reason contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a := attachRaw(t, d)
				ch := d.ask(map[string]any{"pipeline": [][]string{{"echo", "approved"}}})
				p := a.prompt()
				a.sendLine(fmt.Sprintf(tc.line, p.ID, p.Hash))
				if m := a.next(); m.Type != remote.MsgError || m.Message != "bad message: "+tc.want {
					t.Errorf("got %+v, want error %q", m, "bad message: "+tc.want)
				}
				if r := <-ch; r.Status == wire.StatusOK || string(r.Stdout) != "" {
					t.Errorf("request ran: %s", r.raw)
				}
			})
		}
	})
	d.alive()
}
