package e2e

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// TestStderrCapShared: the stages of a run share one 16 MiB cap for their
// stderr, so a requester cannot multiply what the root daemon keeps by
// its stage count. Account memag, allowed only unprivileged shells, sends
// a run of 16 stages each writing 16 MiB + 1 byte to stderr (stage i
// writes "i\n" over and over). The answer's stderrs hold 16 MiB together,
// each a prefix of what its stage wrote, every stage is marked truncated
// (each wrote more than was kept of it), and the real daemon's peak RSS
// grows by no more than two caps and the slack: with a cap per stream, 17
// of them (272 MiB) could be kept.
func TestStderrCapShared(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "memag")
	d := startDaemon(t, opts{Policy: "allow unprivileged sh ...\n"})
	openToAll(t, d)
	pid := d.Cmd.Process.Pid
	idle := vmHWM(t, pid)

	const stages, size = 16, wire.MaxCapture + 1
	var pipeline [][]string
	for i := 1; i <= stages; i++ {
		pipeline = append(pipeline, []string{"sh", "-c", fmt.Sprintf("yes %d | head -c %d >&2", i, size)})
	}
	r := wantOK(t, sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": pipeline, "privileged": false})))
	peak := vmHWM(t, pid)

	kept := 0
	for i, st := range r.Stages {
		line := []byte(strconv.Itoa(i+1) + "\n")
		wrote := bytes.Repeat(line, size/len(line)+1)[:size]
		if !bytes.HasPrefix(wrote, st.Stderr) {
			t.Errorf("stage %d: the %d bytes of stderr kept are not the first it wrote", i+1, len(st.Stderr))
		}
		if !st.StderrTruncated {
			t.Errorf("stage %d: %d of its %d bytes of stderr kept, and not marked truncated", i+1, len(st.Stderr), size)
		}
		kept += len(st.Stderr)
	}
	t.Logf("daemon peak RSS: %d KiB idle, %d KiB after a run of %d stages keeping %d bytes of stderr together", idle>>10, peak>>10, len(r.Stages), kept)
	if len(r.Stages) != stages || kept != wire.MaxCapture {
		t.Errorf("%d stages kept %d bytes of stderr together; want %d stages and %d bytes, the cap they share", len(r.Stages), kept, stages, wire.MaxCapture)
	}
	// What one run may keep: one cap for all of stderr (its stdout is
	// not kept: it goes into the answer as it comes), bounded here as
	// loosely as when a run kept a cap of stdout too. The race
	// detector's shadow memory, in a daemon built with it, triples what
	// a run adds.
	bound := int64(2*wire.MaxCapture) + rssSlack()
	if rgtest.Race() {
		bound *= 3
	}
	if peak-idle > bound {
		t.Errorf("a run of %d stages writing %d bytes of stderr each raised the daemon's peak RSS by %d KiB; want at most %d KiB", stages, size, (peak-idle)>>10, bound>>10)
	}
}
