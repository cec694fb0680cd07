package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Problem is the first record at which a log fails verification.
type Problem struct {
	File string
	Line int    // 1-based
	Seq  uint64 // the record's seq, 0 when it could not be read
	What string
}

func (p *Problem) Error() string {
	if p.Seq > 0 {
		return fmt.Sprintf("%s:%d: seq %d: %s", p.File, p.Line, p.Seq, p.What)
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.What)
}

// Summary describes a log that verified.
type Summary struct {
	Files    int
	Records  int
	FirstSeq uint64
	LastSeq  uint64
	// Genesis is the genesis value, when the first file given starts
	// the log; "" when it starts with a rotated record (earlier files
	// were not given, or were removed).
	Genesis string
	// After names the file the first record chains to when the log
	// starts with a rotated record: that file and the ones before it
	// were pruned (Options.Keep) or not given.
	After string
	// LastHash is the hash of the last record: comparing it with a copy
	// kept elsewhere (the journal) shows whether records were cut from
	// the end, which the chain alone cannot.
	LastHash string
}

// Files lists the audit file at path and its rotated predecessors
// (PATH.NNNNNNNNNNNNNNNNNNNN), oldest first. path itself is listed last
// when it exists.
func Files(path string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	base := filepath.Base(path) + "."
	var out []string
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, base) || !allDigits(n[len(base):]) || len(n)-len(base) != 20 {
			continue
		}
		out = append(out, filepath.Join(filepath.Dir(path), n))
	}
	sort.Strings(out)
	if _, err := os.Lstat(path); err == nil {
		out = append(out, path)
	}
	return out, nil
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Verify checks the files, in order, as one log: each record's own hash,
// sequence numbers that go up by one, each record's prev equal to the
// hash of the record before it (across files too: a file after the first
// must start with a rotated record chaining to the previous file's last),
// and a log that starts with a genesis record of seq 1, or with a rotated
// record when earlier files are not given. It returns a *[Problem] for the
// first record that fails, or an error when a file cannot be read.
func Verify(files []string) (Summary, error) {
	v := &verifier{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return v.sum, fmt.Errorf("audit: %w", err)
		}
		err = v.file(name, f)
		f.Close()
		if err != nil {
			return v.sum, err
		}
	}
	if v.sum.Records == 0 {
		return v.sum, errors.New("audit: no records")
	}
	return v.sum, nil
}

// verifier carries the chain from record to record and file to file.
type verifier struct {
	sum      Summary
	prevFile string
}

// file checks one file's records against the chain so far.
func (v *verifier) file(name string, r io.Reader) error {
	v.sum.Files++
	line := 0
	bad := func(seq uint64, format string, args ...any) error {
		return &Problem{File: name, Line: line, Seq: seq, What: fmt.Sprintf(format, args...)}
	}
	err := eachLine(r, func(b []byte, complete bool) error {
		line++
		if !complete {
			return bad(0, "record is cut short (no newline at its end)")
		}
		h, sum, err := parse(b)
		if err != nil {
			return bad(0, "%v", err)
		}
		seq := *h.Seq
		first := v.sum.Records == 0
		switch {
		case first && h.Kind == KindGenesis:
			if seq != 1 {
				return bad(seq, "genesis record with seq %d, want 1", seq)
			}
			v.sum.Genesis = *h.Prev
		case first && h.Kind == KindRotated:
			// Earlier files pruned or not given: the chain is checked
			// from here.
			v.sum.After = h.PrevFile
		case first:
			return bad(seq, "log starts with a %q record, not genesis or rotated", h.Kind)
		case seq != v.sum.LastSeq+1:
			if seq > v.sum.LastSeq+1 {
				return bad(seq, "seq %d follows %d: %d record(s) missing before this one", seq, v.sum.LastSeq, seq-v.sum.LastSeq-1)
			}
			return bad(seq, "seq %d follows %d: records out of order or repeated", seq, v.sum.LastSeq)
		case *h.Prev != v.sum.LastHash:
			return bad(seq, "prev does not match the hash of the record before (seq %d): that record was changed, or records between were removed", v.sum.LastSeq)
		case h.Kind == KindGenesis:
			return bad(seq, "genesis record in the middle of the log")
		case line == 1 && h.Kind != KindRotated:
			return bad(seq, "file starts with a %q record, not rotated: the end of the previous file %s may be missing", h.Kind, filepath.Base(v.prevFile))
		case line > 1 && h.Kind == KindRotated:
			return bad(seq, "rotated record in the middle of a file")
		case line == 1 && h.PrevFile != filepath.Base(v.prevFile):
			return bad(seq, "rotated record names previous file %q, but it follows %s", h.PrevFile, filepath.Base(v.prevFile))
		}
		if first {
			v.sum.FirstSeq = seq
		}
		v.sum.Records++
		v.sum.LastSeq, v.sum.LastHash = seq, sum
		return nil
	})
	if err != nil {
		var p *Problem
		switch {
		case errors.As(err, &p):
			return p
		case errors.Is(err, errLineTooLong):
			return &Problem{File: name, Line: line + 1, What: err.Error()}
		}
		// The file could not be read: that says nothing of the chain.
		return fmt.Errorf("audit: read %s: %w", name, err)
	}
	// An empty file is what a crash right after rotation leaves; a file
	// after it then fails the rotated record's prev_file check.
	v.prevFile = name
	return nil
}

// Read is one record read for display, or the reason a line could not be.
type Read struct {
	File   string
	Line   int
	Record *Record
	Err    error
}

// ReadAll reads every record of the files in order, for display; it does
// not check the chain (see [Verify]). Lines that do not parse come back
// with Err set.
func ReadAll(files []string, fn func(Read) error) error {
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		line := 0
		err = eachLine(f, func(b []byte, complete bool) error {
			line++
			rd := Read{File: name, Line: line}
			if !complete {
				rd.Err = errors.New("record is cut short (no newline at its end)")
			} else {
				rd.Record, rd.Err = decode(b)
			}
			return fn(rd)
		})
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
