package wire

import (
	"encoding/json"
	"io"
)

// Progress phases: what a request that asked for progress lines is doing.
const (
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
}

// WriteProgress writes a progress line for request id.
func WriteProgress(w io.Writer, id, phase string) error {
	b, err := json.Marshal(ProgressLine{ID: id, Progress: phase})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// maxProgressLine bounds a progress line, {"id":ID,"progress":PHASE}: an
// id of MaxIDLen characters, each escaped at worst as \uXXXX, and a word.
const maxProgressLine = 6*MaxIDLen + 64

// ParseProgress reports whether line is a progress line and, if it is,
// its phase. A line with a "status" key is an answer, never progress.
func ParseProgress(line []byte) (phase string, ok bool) {
	// A progress line is an id and a word; the answer that follows can be
	// tens of MiB of output, which is not decoded twice to find that out.
	if len(line) > maxProgressLine {
		return "", false
	}
	var v struct {
		Progress *string         `json:"progress"`
		Status   json.RawMessage `json:"status"`
	}
	if json.Unmarshal(line, &v) != nil || v.Progress == nil || v.Status != nil {
		return "", false
	}
	return *v.Progress, true
}
