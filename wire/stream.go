package wire

import (
	"bufio"
	"encoding/base64"
	"io"
)

// StdoutStream writes a run's answer line while the run goes on, so that
// its stdout is never held whole: [StdoutStream.Write] begins the line
// ({"id":ID,"stdout":") and base64-encodes stdout's bytes after it as
// they come, and [StdoutStream.Finish], once the run is over, writes the
// rest of the line (stdout_truncated, then status, code, stages and every
// other field, as [WriteResponse] does). It is the same answer as
// WriteResponse's, with its fields in another order, which encoding/json
// does not mind: decoded, the two are equal. A run whose stdout is
// shorter than 3 bytes writes nothing before Finish, which then writes the
// line as WriteResponse does.
//
// A StdoutStream is not safe for concurrent use. Once a write to its
// writer fails, it writes nothing more: the line stays unfinished, and
// Write and Finish return that error.
type StdoutStream struct {
	w     io.Writer
	id    string
	early [2]byte // stdout's first bytes, while there are fewer than 3
	ne    int     // how many early holds
	// Once begun: the line goes through bw, stdout through enc into it
	// (base64 encodes three bytes at a time; enc keeps the last one or
	// two until more come, or until it is closed).
	begun bool
	bw    *bufio.Writer
	enc   io.WriteCloser
	err   error // the first write error
}

// streamWrite is the buffer of a begun StdoutStream: room for a pipe's
// default capacity (64 KiB) of stdout once encoded, with the line's
// head, so that a read of stdout is one write to the writer.
const streamWrite = 96 << 10

// NewStdoutStream returns a stream of request id's answer line to w.
func NewStdoutStream(w io.Writer, id string) *StdoutStream {
	return &StdoutStream{w: w, id: id}
}

// Begun reports whether some of the line was written, or a write of it
// tried: from then on nothing but the rest of this line may be written to
// its writer.
func (s *StdoutStream) Begun() bool { return s.begun }

// Write encodes p as the next bytes of stdout and writes the encoding,
// with the line's head before the first of it. The last one or two bytes
// of stdout so far wait for the next Write or for Finish (base64 encodes
// three at a time), so each Write writes all but those.
func (s *StdoutStream) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if !s.begun {
		if s.ne+len(p) < 3 {
			s.ne += copy(s.early[s.ne:], p)
			return len(p), nil
		}
		s.begin()
	}
	if _, err := s.enc.Write(p); err != nil {
		s.err = err
		return 0, err
	}
	if s.err = s.bw.Flush(); s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}

// begin starts the line: its head, then stdout's first bytes, encoded.
func (s *StdoutStream) begin() {
	s.begun = true
	s.bw = bufio.NewWriterSize(s.w, streamWrite)
	e := &lineEncoder{w: s.bw}
	e.raw(`{"id":`)
	e.str(s.id)
	e.raw(`,"stdout":"`)
	s.err = e.err
	s.enc = base64.NewEncoder(base64.StdEncoding, s.bw)
	_, _ = s.enc.Write(s.early[:s.ne]) // fewer than 3 bytes: kept, not written
}

// Finish writes the rest of the line: r's own Stdout and StdoutChunks,
// when it has any, after the bytes written, then every field of r but
// its id (the line's head has the stream's), and the newline. When no
// write was made yet, it writes the whole line as [WriteResponse] does.
// It is the stream's last call.
func (s *StdoutStream) Finish(r *Response) error {
	if _, err := s.Write(r.Stdout); err != nil {
		return err
	}
	for _, c := range r.StdoutChunks {
		if _, err := s.Write(c); err != nil {
			return err
		}
	}
	rest := *r
	rest.Stdout, rest.StdoutChunks = nil, nil
	if !s.begun {
		rest.Stdout = s.early[:s.ne]
		s.begun = true
		s.err = WriteResponse(s.w, &rest)
		return s.err
	}
	e := &lineEncoder{w: s.bw, err: s.enc.Close()}
	e.raw(`"`)
	if r.StdoutTruncated {
		e.raw(`,"stdout_truncated":true`)
	}
	e.fields(&rest, false)
	if e.err == nil {
		e.err = s.bw.Flush()
	}
	s.err = e.err
	return s.err
}
