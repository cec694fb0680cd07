package box

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// shipJournal follows docs/audit.md, "Shipping the journal to another
// host", inside the box, with the box as both ends: systemd-journal-remote
// receives on a free local port (the recipe's 19532 may be taken on the
// host, whose network the box shares), systemd-journal-upload sends the
// journal there, and a request made after the upload started must arrive
// with its audit fields.
func shipJournal(t *testing.T, b *Box) {
	port := freePort(t)
	// The receiving host (docs/audit.md, steps 1 and 2).
	b.sh(t, `mkdir -p /etc/systemd/system/systemd-journal-remote.service.d /etc/systemd/system/systemd-journal-remote.socket.d
cat > /etc/systemd/system/systemd-journal-remote.service.d/http.conf <<'EOF'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-journal-remote --listen-http=-3 --output=/var/log/journal/remote/
EOF
printf '[Socket]\nListenStream=\nListenStream=127.0.0.1:`+fmt.Sprint(port)+`\n' > /etc/systemd/system/systemd-journal-remote.socket.d/port.conf
systemctl daemon-reload
systemctl enable --now systemd-journal-remote.socket`)
	// The sending host (step 3).
	b.sh(t, `mkdir -p /etc/systemd/journal-upload.conf.d
printf '[Upload]\nURL=http://127.0.0.1:`+fmt.Sprint(port)+`\n' > /etc/systemd/journal-upload.conf.d/rootgate.conf
systemctl enable --now systemd-journal-upload.service`)

	// A request made now, allowed by the rule of the reload step.
	out, err := b.exec("", "runuser", "-u", requester, "--", "rootgate", "run", "--reason", "shipped off-host", "--", "hostname")
	if err != nil {
		t.Fatalf("a request to ship: %v, %s", err, out)
	}
	var id string
	for _, e := range journal(t, b, "-u", "rootgate.service", "EVENT=received") {
		if e["REQUESTER_UID"] == fmt.Sprint(requesterUID()) {
			id = e["REQUEST_ID"] // the last one is the request just made
		}
	}
	if id == "" {
		t.Fatal("the request is not in the local journal")
	}
	// Step 4: what the receiving host sees.
	var got map[string]string
	if !testutil.PollEvery(200*time.Millisecond, 60*time.Second, func() bool {
		// Until the first upload, the directory is not there.
		out, err := b.output("journalctl", "-q", "-o", "json", "-D", "/var/log/journal/remote", "REQUEST_ID="+id, "EVENT=finished")
		if err != nil || strings.TrimSpace(out) == "" {
			return false
		}
		got = map[string]string{}
		for _, e := range journalLines(t, out) {
			got = e
		}
		return true
	}) {
		st, _ := b.exec("", "sh", "-c", "systemctl status --no-pager systemd-journal-upload.service systemd-journal-remote.service; ls -la /var/log/journal/remote")
		t.Fatalf("REQUEST_ID=%s EVENT=finished did not reach the receiving journal within 60 s:\n%s", id, st)
	}
	if got["SYSLOG_IDENTIFIER"] != "rootgated" || got["AUDIT_SEQ"] == "" || got["AUDIT_HASH"] == "" || got["OUTCOME"] == "" {
		t.Errorf("the shipped entry lacks rootgate's fields: %v", got)
	}
	// journalctl -u works on the receiving side too.
	if out, _ := b.exec("", "journalctl", "-q", "-o", "cat", "-D", "/var/log/journal/remote", "-u", "rootgate.service", "REQUEST_ID="+id); !strings.Contains(out, "audit: finished") {
		t.Errorf("journalctl -D /var/log/journal/remote -u rootgate.service REQUEST_ID=%s:\n%s", id, out)
	}
	b.sh(t, "systemctl disable --now systemd-journal-upload.service systemd-journal-remote.socket systemd-journal-remote.service")
}

// freePort is a TCP port on 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
