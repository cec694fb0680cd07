package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSbinOnPath: a test process running as root, started with a user's
// PATH (as sudo env "PATH=$PATH" does), finds root's tools in /usr/sbin.
func TestSbinOnPath(t *testing.T) {
	if os.Getenv("RG_PRINT_PATH") == "1" {
		p, err := exec.LookPath("useradd")
		os.Stdout.WriteString(os.Getenv("PATH") + "\n" + p + "\n")
		if err != nil {
			os.Exit(1)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("run the tests as root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSbinOnPath$")
	cmd.Env = []string{"RG_PRINT_PATH=1", "PATH=/usr/local/bin:/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	if lines[0] != "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin" || lines[1] != "/usr/sbin/useradd" {
		t.Errorf("child saw PATH %q and useradd at %q", lines[0], lines[1])
	}
}

func TestMissingTool(t *testing.T) {
	if got, want := MissingTool("zenity", "zenity"), "zenity is needed and not on PATH: the README's test command installs it (sudo apt-get install zenity)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
