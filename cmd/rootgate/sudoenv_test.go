package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestSudoEnvAssignments: "sudo TZ=Europe/Paris printenv TZ" means, to
// sudo and its users, printenv with TZ set. Sent as it stands, its first
// word was the command, and one with a slash a path in the current
// directory, which the requester controls: an agent that made
// ./TZ=Europe/Paris there had root run it, behind a command line (and a
// prompt's argv) that reads as printenv. Leading NAME=value words are
// the run's env, checked against the allowlist; the command is what
// follows them.
func TestSudoEnvAssignments(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: testutil.ShortDir(t)})
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "TZ=Europe"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "TZ=Europe", "Paris"), []byte("#!/bin/sh\necho the agent\\'s script ran as $(id -un)\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sudo := func(args ...string) (string, string, error) {
		cmd := sudoCmd(t, d, args...)
		cmd.Dir = work
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	out, errs, err := sudo("TZ=Europe/Paris", "LC_ALL=C.UTF-8", "printenv", "TZ", "LC_ALL")
	if err != nil || out != "Europe/Paris\nC.UTF-8\n" {
		t.Fatalf("sudo TZ=Europe/Paris LC_ALL=C.UTF-8 printenv TZ LC_ALL: %v, stdout %q, stderr %q", err, out, errs)
	}
	files, err := audit.Files(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	var sent [][]string
	_ = audit.ReadAll(files, func(r audit.Read) error {
		if r.Err == nil && r.Record.Kind == audit.KindReceived && r.Record.Request != nil {
			sent = r.Record.Request.Pipeline
		}
		return nil
	})
	if len(sent) != 1 || strings.Join(sent[0], " ") != "printenv TZ LC_ALL" {
		t.Errorf("request's pipeline %q, want printenv TZ LC_ALL", sent)
	}
	// A key the allowlist refuses is refused, not sent as a command.
	out, errs, err = sudo("LD_PRELOAD=/tmp/x.so", "id")
	if err == nil || out != "" || !strings.Contains(errs, "LD_PRELOAD may not be set") {
		t.Errorf("sudo LD_PRELOAD=/tmp/x.so id: %v, stdout %q, stderr %q", err, out, errs)
	}
}

// TestSudoEnvChecked: --preserve-env=LIST and NAME=value words are held
// to the built-in env allowlist alike: names it refuses refuse the
// request, all named in one error (a name --preserve-env gives is
// refused even when it is not set here), and so does a value it refuses;
// what it admits is sent, a NAME=value over a preserved one. -E leaves
// out, with a warning, what --preserve-env would refuse.
func TestSudoEnvChecked(t *testing.T) {
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TZ", "UTC")
	t.Setenv("FOO", "bar")
	os.Unsetenv("LC_TIME")
	os.Unsetenv("BAR")
	// Errors and warnings are matched by their start.
	admits := "the env allowlist built into rootgate admits only " + envAllowlist()
	for _, c := range []struct {
		name     string
		o        sudoOptions
		badLANG  bool // LANG holds a value the allowlist refuses
		want     map[string]string
		wantErr  string
		wantWarn string
	}{
		{name: "preserved, set or not", o: sudoOptions{preserve: []string{"LANG", "LC_TIME"}}, want: map[string]string{"LANG": "C.UTF-8"}},
		{name: "preserved names refused", o: sudoOptions{preserve: []string{"LANG", "FOO", "BAR"}},
			wantErr: "sudo --preserve-env: FOO, BAR may not be passed: " + admits},
		{name: "preserved value refused", o: sudoOptions{preserve: []string{"LANG"}}, badLANG: true,
			wantErr: `sudo --preserve-env: env "LANG" must be a locale name`},
		{name: "set", o: sudoOptions{setEnv: []envVar{{"TZ", "Europe/Paris", true}}}, want: map[string]string{"TZ": "Europe/Paris"}},
		{name: "set names refused", o: sudoOptions{setEnv: []envVar{{"TZ", "UTC", true}, {"LD_PRELOAD", "/tmp/x.so", true}, {"PATH", "/tmp", true}}},
			wantErr: "sudo NAME=value: LD_PRELOAD, PATH may not be set: " + admits},
		{name: "set value refused", o: sudoOptions{setEnv: []envVar{{"LANG", "../../tmp/x", true}}},
			wantErr: `sudo NAME=value: env "LANG" must be a locale name`},
		{name: "preserved names refused first", o: sudoOptions{preserve: []string{"FOO"}, setEnv: []envVar{{"PATH", "/tmp", true}}},
			wantErr: "sudo --preserve-env: FOO may not be passed: " + admits},
		{name: "set over preserved", o: sudoOptions{preserve: []string{"TZ"}, setEnv: []envVar{{"TZ", "Asia/Tokyo", true}}}, want: map[string]string{"TZ": "Asia/Tokyo"}},
		{name: "-E", o: sudoOptions{preserveAll: true}, badLANG: true, want: map[string]string{"TZ": "UTC"},
			wantWarn: `rootgate: warning: sudo -E: LANG is not passed: env "LANG" must be a locale name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.badLANG {
				t.Setenv("LANG", "../../tmp/x")
			}
			var stderr bytes.Buffer
			got, err := preservedEnv(&stderr, c.o)
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("got %v, %v; want an error starting %q", got, err, c.wantErr)
				}
				return
			}
			if c.o.preserveAll {
				// -E passes whatever else of the allowlist is set here.
				maps.DeleteFunc(got, func(k, _ string) bool { _, ok := c.want[k]; return !ok && k != "LANG" })
			}
			if err != nil || !maps.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
			if w := stderr.String(); c.wantWarn == "" && w != "" || !strings.HasPrefix(w, c.wantWarn) || strings.Count(w, "\n") > 1 {
				t.Fatalf("stderr %q, want %q", w, c.wantWarn)
			}
		})
	}
}
