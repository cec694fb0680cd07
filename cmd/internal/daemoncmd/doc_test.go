package daemoncmd

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/daemon"
)

// TestManListsEveryFlag: the manual page and each completion script name
// every flag rootgated parses.
func TestManListsEveryFlag(t *testing.T) {
	docs := map[string]string{}
	for _, kind := range []string{"man", "bash", "zsh", "fish"} {
		var b bytes.Buffer
		if err := writeDoc(&b, kind == "man", kind); err != nil {
			t.Fatal(err)
		}
		docs[kind] = b.String()
	}
	n := 0
	for _, f := range flags {
		n++
		if !strings.Contains(docs["man"], `\fB\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+`\fR`) {
			t.Errorf("the manual page lacks --%s", f.Name)
		}
		for _, sh := range []string{"bash", "zsh"} {
			if !strings.Contains(docs[sh], "--"+f.Name) {
				t.Errorf("the %s completion lacks --%s", sh, f.Name)
			}
		}
		if !strings.Contains(docs["fish"], "-l "+f.Name+" ") {
			t.Errorf("the fish completion lacks --%s", f.Name)
		}
	}
	if n < 15 {
		t.Errorf("only %d flags", n)
	}
}

// TestFlagsParseFromDefaults: each parse of rootgated's flag table starts
// from the defaults, whatever an earlier parse set, so the manual page
// shows the defaults and an in-process Main is not changed by the last.
func TestFlagsParseFromDefaults(t *testing.T) {
	parseArgs := func(args ...string) *config {
		t.Helper()
		c, _, err := parse(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	set := parseArgs("--audit-max-size", "1K", "--audit-min-free", "2K", "--approver", "alice", "--socket", "/tmp/s")
	if set.AuditMaxSize != 1<<10 || set.Daemon.AuditMinFree != 2<<10 || len(set.Approver) != 1 || !set.socketsGiven {
		t.Fatalf("parsed %+v", set)
	}
	def := parseArgs()
	if def.AuditMaxSize != defaultAuditMaxSize || def.Daemon.AuditMinFree != daemon.DefaultAuditMinFree || len(def.Approver) != 0 || def.socketsGiven {
		t.Errorf("a second parse did not start from the defaults: %+v", def)
	}
	var man bytes.Buffer
	if err := writeDoc(&man, true, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(man.String(), fmt.Sprintf("(default: %d)", defaultAuditMaxSize)) {
		t.Errorf("the manual page lacks --audit-max-size's default")
	}
}

// TestOneNamePerSetting: each of rootgated's settings is bound to a field
// of its own, named as its flag (max-conns-per-uid is MaxConnsPerUID), in
// config or in the daemon.Config it holds, so a setting has one name from
// the command line to the daemon.
func TestOneNamePerSetting(t *testing.T) {
	var c config
	fields := map[uintptr]string{} // by address: the field's name
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Type == reflect.TypeFor[daemon.Config]() {
				walk(v.Field(i))
				continue
			}
			fields[v.Field(i).Addr().Pointer()] = f.Name
		}
	}
	walk(reflect.ValueOf(&c).Elem())
	bound := map[string]string{} // field → flag
	for _, s := range flags {
		name, ok := fields[reflect.ValueOf(s.Field(&c)).Pointer()]
		if !ok {
			t.Errorf("--%s is bound to no field of config", s.Name)
			continue
		}
		if !strings.EqualFold(strings.ReplaceAll(s.Name, "-", ""), name) {
			t.Errorf("--%s is bound to the field %s: one name per setting", s.Name, name)
		}
		if other, dup := bound[name]; dup {
			t.Errorf("--%s and --%s are both bound to %s", s.Name, other, name)
		}
		bound[name] = s.Name
	}
	if len(bound) < 30 {
		t.Errorf("only %d settings bound", len(bound))
	}
}
