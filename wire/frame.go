package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// StreamVersion is the stream framing this package speaks: the value of a
// request's "stream" field (docs/protocol.md, "Streamed output"). A
// request with "stream": 1 is answered, once its run starts, with output
// frames as the run writes its output, then the usual answer line, whose
// stdout and stderr are empty.
const StreamVersion = 1

// CloseStdout is the line a client that asked for streamed output sends
// after its request line when the reader of the run's stdout is gone (its
// own stdout a closed pipe): the daemon sends no more of stdout, and ends
// the run's stdout as a reader that exits ends a pipe, so that the last
// stage's next write fails with EPIPE (SIGPIPE); stderr and the answer
// come as before.
const CloseStdout = `{"close":"stdout"}` + "\n"

// MaxFrameData is the most output bytes one frame carries: a frame line is
// at most 4/3 of it, base64-encoded, and a short head.
const MaxFrameData = 64 << 10

// maxFrameLine bounds a frame line: its data encoded, its keys and stage.
const maxFrameLine = (MaxFrameData+2)/3*4 + 64

// Frame is one frame of a streamed run's output: Data written by the last
// stage to its stdout (Stage 0) or by stage Stage (counted from 1) to its
// stderr.
type Frame struct {
	Stage int
	Data  []byte
}

// ErrBadFrame: a line that is a frame (it has a "stdout" or "stderr" key
// and neither "status" nor "progress") but not a valid one.
var ErrBadFrame = errors.New("bad stream frame")

// AppendFrame appends f's line, newline included, to b:
// {"stdout":"BASE64"} or {"stderr":"BASE64","stage":N}. f.Data must be at
// most MaxFrameData bytes.
func AppendFrame(b []byte, f Frame) []byte {
	key := `{"stdout":"`
	if f.Stage > 0 {
		key = `{"stderr":"`
	}
	b = append(b, key...)
	b = base64.StdEncoding.AppendEncode(b, f.Data)
	b = append(b, '"')
	if f.Stage > 0 {
		b = append(b, `,"stage":`...)
		b = strconv.AppendInt(b, int64(f.Stage), 10)
	}
	return append(b, "}\n"...)
}

// ParseFrame reports whether line (with or without its newline) is a
// frame and, if it is, returns it. A line with a "status" key (the answer)
// or a "progress" key (a progress line) is not a frame, nor is one with
// neither "stdout" nor "stderr", one that is not a JSON object, or one
// longer than a frame can be; ok is false for them and err nil (the
// caller reads such a line as the answer, and judges it so). A frame
// that breaks the framing's rules (both keys, data that is not base64 or
// over MaxFrameData, a stderr frame without a stage from 1 to MaxStages,
// a stdout frame with one) returns ok true and an error wrapping
// ErrBadFrame. Keys it does not know are ignored.
func ParseFrame(line []byte) (f Frame, ok bool, err error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if f, ok := parseCanonical(line); ok {
		return f, true, nil
	}
	return parseFrameJSON(line)
}

// parseCanonical reads a frame written as AppendFrame writes it, without
// a JSON decoder (a frame of 64 KiB takes it a tenth of the time): it
// reports false for any other line, which parseFrameJSON then judges. Of
// a line it takes, the two agree.
func parseCanonical(line []byte) (Frame, bool) {
	var f Frame
	rest, isOut := bytes.CutPrefix(line, []byte(`{"stdout":"`))
	if !isOut {
		var ok bool
		if rest, ok = bytes.CutPrefix(line, []byte(`{"stderr":"`)); !ok {
			return Frame{}, false
		}
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || end > (MaxFrameData+2)/3*4 {
		return Frame{}, false
	}
	data, tail := rest[:end], rest[end+1:]
	if !base64Text(data) {
		return Frame{}, false
	}
	if !isOut {
		n, ok := canonicalStage(tail)
		if !ok {
			return Frame{}, false
		}
		f.Stage = n
	} else if string(tail) != "}" {
		return Frame{}, false
	}
	var err error
	if f.Data, err = base64.StdEncoding.AppendDecode(make([]byte, 0, base64.StdEncoding.DecodedLen(len(data))), data); err != nil {
		return Frame{}, false
	}
	return f, true
}

// base64Text reports whether data holds only the characters of standard
// base64: letters, digits, '+', '/' and '='.
func base64Text(data []byte) bool {
	for _, c := range data {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}

// canonicalStage reads the end of a stderr frame as AppendFrame writes
// it, after its data: `,"stage":N}`, N from 1 to MaxStages without a
// leading zero.
func canonicalStage(tail []byte) (int, bool) {
	num, ok := bytes.CutPrefix(tail, []byte(`,"stage":`))
	if !ok || len(num) < 2 || len(num) > 3 || num[len(num)-1] != '}' {
		return 0, false
	}
	num = num[:len(num)-1]
	n, err := strconv.Atoi(string(num))
	if err != nil || num[0] == '0' || n < 1 || n > MaxStages {
		return 0, false
	}
	return n, true
}

// parseFrameJSON is ParseFrame for any line, through a JSON decoder.
func parseFrameJSON(line []byte) (f Frame, ok bool, err error) {
	if len(line) == 0 || line[0] != '{' {
		return Frame{}, false, nil
	}
	// A frame is short; a longer line is an answer (which may hold tens
	// of MiB of a run's output) or a frame too long to be one.
	if len(line) > maxFrameLine {
		return Frame{}, false, nil
	}
	var v struct {
		Stdout   *string         `json:"stdout"`
		Stderr   *string         `json:"stderr"`
		Stage    json.RawMessage `json:"stage"`
		Status   json.RawMessage `json:"status"`
		Progress json.RawMessage `json:"progress"`
	}
	if json.Unmarshal(line, &v) != nil || v.Status != nil || v.Progress != nil || v.Stdout == nil && v.Stderr == nil {
		return Frame{}, false, nil
	}
	data := v.Stdout
	switch {
	case v.Stdout != nil && v.Stderr != nil:
		return Frame{}, true, fmt.Errorf("%w: both stdout and stderr", ErrBadFrame)
	case v.Stdout != nil && v.Stage != nil:
		return Frame{}, true, fmt.Errorf("%w: a stdout frame has no stage", ErrBadFrame)
	case v.Stderr != nil:
		data = v.Stderr
		n, err := strconv.Atoi(string(v.Stage))
		if err != nil || n < 1 || n > MaxStages {
			return Frame{}, true, fmt.Errorf("%w: a stderr frame needs a stage from 1 to %d", ErrBadFrame, MaxStages)
		}
		f.Stage = n
	}
	if len(*data) > (MaxFrameData+2)/3*4 {
		return Frame{}, true, fmt.Errorf("%w: more than %d bytes of data", ErrBadFrame, MaxFrameData)
	}
	if f.Data, err = base64.StdEncoding.DecodeString(*data); err != nil {
		return Frame{}, true, fmt.Errorf("%w: data is not base64", ErrBadFrame)
	}
	return f, true, nil
}

// FrameWriter writes a streamed run's output frames to a writer, each
// frame with one Write of that writer. Stdout and Stderr return writers
// for [pipeline.Cmd]'s StdoutTo and StderrTo; they may be used from
// several goroutines at once, each frame written whole under Lock. Once a
// write fails, nothing more is written and every Write returns that
// error.
type FrameWriter struct {
	w      io.Writer
	before func() // called before the first frame, under no lock
	once   sync.Once
	lock   func() func()
	begun  bool
	err    error
	buf    []byte
}

// NewFrameWriter returns a FrameWriter writing to w. before, when not
// nil, is called once before the first frame is written. lock, when not
// nil, is taken around each frame's write (and around Begun's read): it
// returns its unlock; the caller shares it with whatever else writes to w.
func NewFrameWriter(w io.Writer, before func(), lock func() (unlock func())) *FrameWriter {
	return &FrameWriter{w: w, before: before, lock: lock}
}

// Begun reports whether a frame was written, or its write tried. The
// caller holds the lock.
func (fw *FrameWriter) Begun() bool { return fw.begun }

// Err is the error of the write that failed, nil while none has. The
// caller holds the lock.
func (fw *FrameWriter) Err() error { return fw.err }

// Stdout returns the writer of the last stage's stdout frames.
func (fw *FrameWriter) Stdout() io.Writer { return frameTo{fw, 0} }

// Stderr returns the writer of stage i's stderr frames, i counted from 0
// as in [pipeline.Cmd].Argv (the frames count from 1).
func (fw *FrameWriter) Stderr(i int) io.Writer { return frameTo{fw, i + 1} }

type frameTo struct {
	fw    *FrameWriter
	stage int
}

func (t frameTo) Write(p []byte) (int, error) {
	fw := t.fw
	if fw.before != nil {
		fw.once.Do(fw.before) // not under lock: it writes through it
	}
	if fw.lock != nil {
		defer fw.lock()()
	}
	if fw.err != nil {
		return 0, fw.err
	}
	fw.begun = true
	n := 0
	for n < len(p) {
		chunk := p[n:min(len(p), n+MaxFrameData)]
		fw.buf = AppendFrame(fw.buf[:0], Frame{Stage: t.stage, Data: chunk})
		if _, err := fw.w.Write(fw.buf); err != nil {
			fw.err = err
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}
