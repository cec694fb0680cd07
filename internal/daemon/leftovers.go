package daemon

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/pipeline"
)

// Without cgroups, a run's processes are found by its environment tag
// and its stages' process groups and sessions (pipeline.KillLeftovers).
// So that the next daemon can find them when this one dies mid-run, each
// run in progress has a file in runsDir, named by its tag, made before
// its first process and removed once the run has ended and been swept.

// runsDirName is runsDir's name in the runtime directory.
const runsDirName = "runs"

// runsDir is where the runs in progress of a daemon without cgroups are
// recorded: under the runtime directory, which is root's alone.
func (s *Server) runsDir() string { return filepath.Join(s.cfg.RuntimeDir, runsDirName) }

// runFile is what a run's file in runsDir holds.
type runFile struct {
	ID     string            `json:"id"`
	Boot   string            `json:"boot"` // the kernel's boot id: pids of another boot mean nothing
	Stages []pipeline.Leader `json:"stages,omitempty"`
}

// bootID is the kernel's boot id, "" when it cannot be read.
func bootID() string { return thisBoot() }

// thisBoot reads the boot id once: it is the same for the daemon's life.
var thisBoot = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// trackRun records cmd, the run of request id, in runsDir before it
// starts, and its stages' processes once they have all started; the
// run's Tag is set here. A daemon killed between its stages' start and
// that second write leaves a record of the tag alone: the next daemon
// then finds the run's processes that kept the tag, not those that
// emptied their environment in their stage's group or session. The
// returned end removes the record: call it once the run has ended. A
// run that cannot be recorded is not run.
func (s *Server) trackRun(id string, cmd *pipeline.Cmd) (end func(), err error) {
	if err := os.MkdirAll(s.runsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("record the run for the next daemon: %w", err)
	}
	cmd.Tag = pipeline.NewRunTag()
	path := filepath.Join(s.runsDir(), cmd.Tag)
	rec := runFile{ID: id, Boot: bootID()}
	write := func() error {
		b, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		// Replaced whole: the file is never seen half written (its
		// name, the tag, is enough to find the run all the same).
		tmp := path + ".new"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(); err != nil {
		os.Remove(path + ".new")
		return nil, fmt.Errorf("record the run for the next daemon: %w", err)
	}
	cmd.Started = func(stages []pipeline.Leader) {
		rec.Stages = stages
		if err := write(); err != nil {
			s.cfg.Log.Error("cannot record a run's processes for the next daemon: a crash would leave those that change their environment", "id", id, "err", err)
		}
	}
	return func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.cfg.Log.Error("cannot remove a run's record", "file", path, "err", err)
		}
	}, nil
}

// recoverLeftovers kills what is left of the runs a daemon without
// cgroups recorded in runsDir and never saw end (it died mid-run), as far
// as it can be found (pipeline.KillLeftovers), removes their records, and
// returns the cgroup.RunName of each such run's id, for its orphaned record.
func (s *Server) recoverLeftovers() map[string]bool {
	dir := s.runsDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.cfg.Log.Error("cannot look for runs left by a previous daemon", "dir", dir, "err", err)
		}
		return nil
	}
	boot := bootID()
	var tags, ids []string
	var leaders []pipeline.Leader
	swept := map[string]bool{}
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		name := e.Name()
		if b, err := hex.DecodeString(name); err != nil || len(b) != 16 || !e.Type().IsRegular() {
			os.Remove(path) // a record half made (.new), or no record
			continue
		}
		var rec runFile
		if b, err := os.ReadFile(path); err == nil {
			_ = json.Unmarshal(b, &rec) // the tag alone still finds the run
		}
		if rec.Boot == "" || rec.Boot == boot {
			tags = append(tags, name)
			leaders = append(leaders, rec.Stages...)
			if rec.ID != "" {
				ids = append(ids, rec.ID)
				swept[cgroup.RunName(rec.ID)] = true
			}
		}
	}
	if len(tags) > 0 {
		n := pipeline.KillLeftovers(tags, leaders)
		s.cfg.Log.Warn("killed the processes left by runs of a daemon that did not stop cleanly, as far as they could be found without cgroups", "runs", len(tags), "processes", n, "ids", strings.Join(ids, ","))
	}
	for _, e := range ents {
		os.Remove(filepath.Join(dir, e.Name()))
	}
	return swept
}
