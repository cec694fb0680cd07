package daemon

import (
	"path/filepath"
	"slices"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/progid"
	"github.com/rootgate/rootgate/pipeline"
)

// newPrograms is the index of the programs of approval's list (those
// that run what they read, or a command an option says) found in the
// search path's directories, by what their files are.
func newPrograms() *progid.Index {
	return progid.New(filepath.SplitList(pipeline.SearchPath), approval.Listed)
}

// identify returns p's stages for the prompt, each with what its program is beyond
// its names: the listed program its file is, a hard link to or a copy of
// one under another name (approval.Stage.Is), when none of its names is
// listed; and the interpreters the kernel runs for a #! script, each
// with the listed program it is (approval.Stage.Interpreters). A grant
// or a rule for such a stage then needs the second confirmation
// (approval.RunsAnything), as one for the program by its own name does:
// a root copy of python3 named mytool runs whatever its arguments say.
//
// The index of the listed programs is read with the daemon's identity;
// what the requester named (the stage's file, its #! interpreters) with
// the identity the plan opened it with (asRun), as their resolution was.
func (s *Server) identify(p *runPlan) []approval.Stage {
	stages := slices.Clone(p.stages)
	for i, pin := range p.pinned {
		st := &stages[i]
		if !stageListed(st) {
			ps := pin.Stat()
			st.Is = s.programs.Is(progid.File{Dev: ps.Dev, Ino: ps.Ino, Size: ps.Size, SHA256: func() (sum string, err error) {
				err = p.asRun(func() error {
					sum, err = pin.SHA256()
					return err
				})
				return sum, err
			}})
		}
		var ips []approval.Interpreter
		var files []*progid.File
		_ = p.asRun(func() error {
			return pin.Shebangs(func(ip string) error {
				ips = append(ips, approval.Interpreter{Path: ip})
				if approval.Listed(filepath.Base(ip)) {
					files = append(files, nil) // listed by its name
					return nil
				}
				f, err := progid.PathFile(ip)
				if err != nil {
					files = append(files, nil)
					return nil
				}
				files = append(files, &f)
				return nil
			})
		})
		for j, f := range files {
			if f == nil {
				continue
			}
			hash := f.SHA256
			f.SHA256 = func() (sum string, err error) {
				err = p.asRun(func() error {
					sum, err = hash()
					return err
				})
				return sum, err
			}
			ips[j].Is = s.programs.Is(*f)
		}
		st.Interpreters = ips
	}
	return stages
}

// stageListed reports whether one of the names a stage's program goes by
// (as written, as resolved, the real file's) is listed.
func stageListed(st *approval.Stage) bool {
	if approval.Listed(filepath.Base(st.Path)) || st.Target != "" && approval.Listed(filepath.Base(st.Target)) {
		return true
	}
	return len(st.Argv) > 0 && approval.Listed(filepath.Base(st.Argv[0]))
}

// asRun calls fn with the file system identity p's plan opened its cwd and
// executables with: the run's account for a run that is not privileged or
// runs as a named account, root's otherwise.
func (p *runPlan) asRun(fn func() error) error {
	if !p.req.Privileged || p.account.UID != 0 {
		return pipeline.AsUser(&p.account, fn)
	}
	return fn()
}
