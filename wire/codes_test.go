package wire

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorResponseTexts: an error answer carries the protocol's text and
// code for an error it names, wrapped or not, and "internal error" for
// one it does not, whose own text (a path, a syscall's words) stays out
// of the answer.
func TestErrorResponseTexts(t *testing.T) {
	for _, c := range []struct {
		name      string
		err       error
		code, msg string
	}{
		{"named", NotFoundError(1, "x"), CodeNotFound, `stage 1: executable not found: "x"`},
		{"named, wrapped", fmt.Errorf("as user 1000: %w", CwdMissingError("/nope")), CodeCwd, `cwd "/nope" is not an existing directory`},
		{"named, with a cause", CwdError("/p", errors.New("loop")), CodeCwd, `cwd "/p": loop`},
		{"unnamed", errors.New("as user 1000: setfsuid: operation not permitted"), CodeInternal, "internal error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ErrorResponse("id", c.err)
			if r.ID != "id" || r.Status != StatusError || r.Code != c.code || r.Message != c.msg {
				t.Errorf("got %+v, want code %q message %q", r, c.code, c.msg)
			}
		})
	}
}
