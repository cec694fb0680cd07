package wire

import (
	"bytes"
	"errors"
	"io"
)

// MaxLine is the largest request line accepted, its newline included.
const MaxLine = 1 << 20

// ReadLine reads one request line from r: the bytes up to and including the
// first '\n'. It never buffers more than [MaxLine] bytes and never reads
// past the first [MaxLine] bytes of r. Bytes after the newline that happened
// to arrive in the same read are dropped.
//
// It returns the line without its newline, or one of: io.EOF when r ended
// before any byte, [ErrTooLarge], [ErrNoNewline], or the reader's own error.
func ReadLine(r io.Reader) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= MaxLine {
				return nil, ErrTooLarge
			}
			grown := make([]byte, len(buf), min(2*cap(buf), MaxLine))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		if i := bytes.IndexByte(buf[len(buf):len(buf)+n], '\n'); i >= 0 {
			return buf[:len(buf)+i], nil
		}
		buf = buf[:len(buf)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(buf) == 0 {
					return nil, io.EOF
				}
				return nil, ErrNoNewline
			}
			return nil, err
		}
	}
}
