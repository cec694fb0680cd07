package wire

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
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
	begun bool    // a write of the line was made
	carry [3]byte // the stdout bytes not yet encoded: fewer than 3
	nc    int     // how many carry holds
	buf   []byte  // the encoded bytes of one write to w
	err   error   // the first write error
}

// streamWrite bounds the bytes one write of a StdoutStream hands to its
// writer, the line's head included: room for a pipe's default capacity
// (64 KiB) of stdout once encoded, so that a read of stdout is one write.
const streamWrite = 96 << 10

// NewStdoutStream returns a stream of request id's answer line to w.
func NewStdoutStream(w io.Writer, id string) *StdoutStream {
	return &StdoutStream{w: w, id: id}
}

// Begun reports whether some of the line was written, or a write of it
// tried: from then on nothing but the rest of this line may be written to
// its writer.
func (s *StdoutStream) Begun() bool { return s.begun }

// Err is the error of the write to w that failed, nil while none did.
func (s *StdoutStream) Err() error { return s.err }

// Write encodes p as the next bytes of stdout and writes the encoding,
// with the line's head before the first of it. The last one or two bytes
// of stdout so far wait for the next Write or for Finish (base64 encodes
// three at a time), so each Write writes all but those.
func (s *StdoutStream) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := len(p)
	if s.nc+len(p) < 3 {
		s.nc += copy(s.carry[s.nc:], p)
		return n, nil
	}
	var head []byte
	if !s.begun {
		head = s.head()
	}
	out := s.buffer(len(head)+base64.StdEncoding.EncodedLen(s.nc+len(p)), len(head)+4)
	out = append(out, head...)
	s.begun = true
	if s.nc > 0 {
		k := copy(s.carry[s.nc:], p)
		p = p[k:]
		out = base64.StdEncoding.AppendEncode(out, s.carry[:])
		s.nc = 0
	}
	for len(p) >= 3 {
		room := (cap(out) - len(out)) / 4 * 3
		if room < 3 {
			if out = s.flush(out); s.err != nil {
				return 0, s.err
			}
			continue
		}
		m := min(len(p)/3*3, room)
		out = base64.StdEncoding.AppendEncode(out, p[:m])
		p = p[m:]
	}
	s.nc = copy(s.carry[:], p)
	s.flush(out)
	if s.err != nil {
		return 0, s.err
	}
	return n, nil
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
		rest.Stdout = s.carry[:s.nc]
		s.begun = true
		s.err = WriteResponse(s.w, &rest)
		return s.err
	}
	bw := bufio.NewWriterSize(s.w, bufferSize(&rest))
	e := &lineEncoder{w: bw}
	var last [4]byte
	base64.StdEncoding.Encode(last[:], s.carry[:s.nc])
	e.raw(string(last[:base64.StdEncoding.EncodedLen(s.nc)]))
	e.raw(`"`)
	if r.StdoutTruncated {
		e.raw(`,"stdout_truncated":true`)
	}
	e.fields(&rest, false)
	if e.err == nil {
		e.err = bw.Flush()
	}
	s.err = e.err
	return s.err
}

// head is the line's beginning, up to stdout's first byte.
func (s *StdoutStream) head() []byte {
	id, _ := json.Marshal(s.id) // a string always encodes
	h := make([]byte, 0, len(`{"id":,"stdout":"`)+len(id))
	h = append(h, `{"id":`...)
	h = append(h, id...)
	return append(h, `,"stdout":"`...)
}

// buffer returns s.buf emptied, with room for n bytes, or streamWrite
// when n is more, but never less than least.
func (s *StdoutStream) buffer(n, least int) []byte {
	n = max(min(n, streamWrite), least)
	if cap(s.buf) < n {
		s.buf = make([]byte, 0, max(n, min(2*cap(s.buf), streamWrite)))
	}
	return s.buf[:0]
}

// flush writes out to w, keeping the error, and returns out emptied.
func (s *StdoutStream) flush(out []byte) []byte {
	if len(out) > 0 && s.err == nil {
		_, s.err = s.w.Write(out)
	}
	return out[:0]
}
