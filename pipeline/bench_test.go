package pipeline

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkRunTrue and BenchmarkExecTrue set a one-stage run of /bin/true,
// set up as the daemon sets up its runs, beside os/exec's plain spawn of
// it, in one process with no socket (docs/performance.md):
//
//	go test -run '^$' -bench True -count 5 ./pipeline/
func BenchmarkRunTrue(b *testing.B) {
	acct, err := LookupAccount(uint32(os.Geteuid()))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c := &Cmd{Argv: [][]string{{"true"}}, Paths: []string{"/bin/true"}, Env: Env(acct, nil), Account: &acct}
		res, err := c.Run(context.Background())
		if err != nil || res.Stages[0].ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
