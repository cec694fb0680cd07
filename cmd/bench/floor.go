package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// floorEnv names the socket and the log file of the floor server, when
// the bench runs as it (see startFloor).
const floorEnv = "ROOTGATE_BENCH_FLOOR"

// floorServer is the least a Go server on this machine must do for a
// ["true"] request with rootgated's durability: accept a connection,
// read its line, append it to a log file and fsync it, run /bin/true
// with its stdout and stderr captured through pipes (os/exec, with its
// own copying goroutines), and answer one JSON line. No checks, no
// policy, no cgroup, no other record: what it costs is what Go, the
// kernel and the disk make any such server pay, which bounds what
// rootgated can reach (docs/performance.md, "Targets").
func floorServer(sock, logPath string) error {
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err
	}
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(line, &req)
			answer := func(status, msg string, code int, stdout, stderr []byte) {
				b, _ := json.Marshal(map[string]any{"id": req.ID, "status": status, "message": msg,
					"stages": []map[string]any{{"exit_code": code, "stderr": stderr}}, "stdout": stdout})
				_, _ = c.Write(append(b, '\n'))
			}
			if _, err := log.Write(line); err != nil {
				answer("error", err.Error(), -1, nil, nil)
				return
			}
			if err := log.Sync(); err != nil {
				answer("error", err.Error(), -1, nil, nil)
				return
			}
			var out, errOut bytes.Buffer
			cmd := exec.Command("/bin/true")
			cmd.Stdout, cmd.Stderr = &out, &errOut
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			code := 0
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					answer("error", err.Error(), -1, nil, nil)
					return
				}
				code = ee.ExitCode()
			}
			answer("ok", "", code, out.Bytes(), errOut.Bytes())
		}()
	}
}

// startFloor starts the bench's own binary as the floor server, on a
// private socket, as a process of its own like rootgated.
func (b *bench) startFloor() (*daemon, error) {
	dir, err := b.tempDir()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	d := &daemon{sock: filepath.Join(dir, "s"), log: filepath.Join(dir, "log"), done: make(chan struct{})}
	d.cmd = exec.Command(self)
	d.cmd.Env = append(os.Environ(), floorEnv+"="+d.sock+":"+filepath.Join(dir, "floor.jsonl"))
	d.cmd.Stderr = os.Stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	b.daemons = append(b.daemons, d)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("unix", d.sock); err == nil {
			c.Close()
			return d, nil
		}
		select {
		case <-d.done:
			return nil, errors.New("the floor server exited at start")
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the floor server did not listen within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
