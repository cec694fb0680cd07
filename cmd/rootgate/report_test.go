package main

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// TestReportSaysWhatHappened: rootgate run shows the daemon's clock next
// to this machine's on a time refusal, and a person's deny note.
func TestReportSaysWhatHappened(t *testing.T) {
	var out, errb bytes.Buffer
	code := report(&wire.Response{Status: wire.StatusError, Code: wire.CodeStaleTime, Message: "request too old: 95s (max 60s)", DaemonTime: "2026-02-13T14:31:35Z"}, &out, &errb)
	want := regexp.MustCompile(`^rootgate: error: request too old: 95s \(max 60s\)
rootgate: hint: rootgated's clock says 2026-02-13T14:31:35Z, this machine's \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: if they differ, check time synchronisation \(timedatectl\) on both machines
$`)
	if code != exitError || !want.MatchString(errb.String()) {
		t.Errorf("stale time: exit %d, stderr:\n%s", code, errb.String())
	}
	errb.Reset()
	code = report(&wire.Response{Status: wire.StatusDenied, Code: wire.CodeDeniedByOperator, Message: "denied by operator root on pts/3",
		DecidedBy: &wire.DecidedBy{By: wire.DecidedByPerson, Approver: "root (uid 0) on pts/3", Via: "remote", Note: "use apt, not dpkg"}}, &out, &errb)
	if wantText := "rootgate: denied: denied by operator root on pts/3\nrootgate: note: root (uid 0) on pts/3 wrote: \"use apt, not dpkg\"\n"; code != exitDenied || errb.String() != wantText {
		t.Errorf("note: exit %d, stderr:\n%s", code, errb.String())
	}
}

// TestReportNamesCaptureCap: rootgate run's warnings about a cut stream
// (from a rootgated that does not stream output) give rootgated's cap,
// wire.MaxCapture, and the cut is never silent: an error line says it and
// the exit code is 70, not the command's 0.
func TestReportNamesCaptureCap(t *testing.T) {
	var out, errb bytes.Buffer
	code := report(&wire.Response{Status: wire.StatusOK, Stdout: []byte("y\n"), StdoutTruncated: true,
		Stages: []wire.StageResult{{Stderr: []byte("e\n"), StderrTruncated: true}}}, &out, &errb)
	want := fmt.Sprintf("e\nrootgate: warning: stage 1's stderr was cut: the stages' stderr keep %d MiB together\nrootgate: warning: stdout was cut at %[1]d MiB\n"+
		"rootgate: error: the run's output was cut (rootgated did not stream it, and its answer holds at most %[1]d MiB of stdout and of stderr): exit code 0 is the command's; update rootgated to get every byte\n", wire.MaxCapture>>20)
	if wire.MaxCapture%(1<<20) != 0 || errb.String() != want || code != exitError {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d (wire.MaxCapture is %d bytes):\n%s", code, errb.String(), exitError, wire.MaxCapture, want)
	}
	// Whole output: the command's exit code, nothing added.
	errb.Reset()
	if code := report(&wire.Response{Status: wire.StatusOK, Stages: []wire.StageResult{{ExitCode: 3}}}, &out, &errb); code != 3 || errb.Len() != 0 {
		t.Errorf("whole output: exit %d, stderr %q", code, errb.String())
	}
}
