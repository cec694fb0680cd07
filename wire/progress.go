package wire

import (
	"encoding/json"
	"io"
	"time"
)

// Progress phases: what a request that asked for progress lines is doing.
const (
	// ProgressReceived: the daemon has read the request and checks and
	// decides it; it is sent first, so a client knows the daemon is alive.
	ProgressReceived = "received"
	// ProgressApproval: the request is put to a person.
	ProgressApproval = "approval"
	// ProgressRunning: the request was approved and its run starts.
	ProgressRunning = "running"
)

// ProgressLine is a line the daemon writes before its answer to a request
// that said "progress": true. It has a "progress" key and no "status"
// key; the answer that follows is a [Response].
type ProgressLine struct {
	ID       string `json:"id"`
	Progress string `json:"progress"`
	// Within is, in seconds, the longest the request may take from this
	// line to its answer as the daemon knows it (its prompt timeout, the
	// run's time limit and kill grace), waiting for a run slot aside; 0
	// when the daemon does not say.
	Within float64 `json:"within,omitempty"`
}

// WriteProgress writes a progress line for request id, saying that the
// answer comes within (whole seconds, rounded up; 0 says nothing).
func WriteProgress(w io.Writer, id, phase string, within time.Duration) error {
	secs := float64((within + time.Second - 1) / time.Second)
	b, err := json.Marshal(ProgressLine{ID: id, Progress: phase, Within: secs})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// maxProgressLine bounds a progress line,
// {"id":ID,"progress":PHASE,"within":N}: an id of MaxIDLen characters,
// each escaped at worst as \uXXXX, a word and a number.
const maxProgressLine = 6*MaxIDLen + 128

// ParseProgress reports whether line is a progress line and, if it is,
// its phase and within (0 when the line does not say). A line with a
// "status" key is an answer, never progress.
func ParseProgress(line []byte) (phase string, within time.Duration, ok bool) {
	// A progress line is an id and a word; the answer that follows can be
	// tens of MiB of output, which is not decoded twice to find that out.
	if len(line) > maxProgressLine {
		return "", 0, false
	}
	var v struct {
		Progress *string         `json:"progress"`
		Status   json.RawMessage `json:"status"`
		Within   float64         `json:"within"`
	}
	if json.Unmarshal(line, &v) != nil || v.Progress == nil || v.Status != nil {
		return "", 0, false
	}
	if v.Within > 0 && v.Within < float64(1<<62/time.Second) {
		within = time.Duration(v.Within * float64(time.Second))
	}
	return *v.Progress, within, true
}
