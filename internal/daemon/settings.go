package daemon

import (
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/pipeline"
)

// Settings are the [Config] fields rootgated takes as flags, each declared
// once: its flag, named as the field (max-conns-per-uid is MaxConnsPerUID),
// with its default and its doc, bound to the field. [New] gives a zero
// field its default from here (except where zero is a value of its own:
// ZeroKept); rootgated parses its command line into a Config through it
// and makes its -h, manual page and completions from it. A setting is
// added as a Config field and one entry here, nowhere else.
var Settings = []clidoc.Setting[Config]{
	{Flag: clidoc.Flag{Name: "runtime-dir", Default: DefaultRuntimeDir, Usage: "`directory` for runtime state (the replay window, the audit budgets, SSH agent relays); it must be root's and writable only by root"}, Field: func(c *Config) any { return &c.RuntimeDir }},
	{Flag: clidoc.Flag{Name: "passkeys", Default: passkey.DefaultFile, Usage: "enrolled passkeys `file` (rootgate passkeys add; root's, 0600): approvals signed by one are taken from passkey relays (rootgate web) for every requester; \"\" for none"}, Field: func(c *Config) any { return &c.Passkeys }, ZeroKept: true},
	{Flag: clidoc.Flag{Name: "prompt-timeout", Default: approval.DefaultPromptTimeout, Usage: "how long an approval prompt waits for an answer"}, Field: func(c *Config) any { return &c.PromptTimeout }},
	{Flag: clidoc.Flag{Name: "approver-ping", Default: remote.DefaultPingEvery, Usage: "how often each attached approver client (rootgate approve) is pinged; it answers even while a prompt is up"}, Field: func(c *Config) any { return &c.ApproverPing }},
	{Flag: clidoc.Flag{Name: "approver-silence", Default: remote.DefaultSilence, Usage: "detach an approver client that has answered nothing for this long (a connection gone silent, such as a dead ssh forward); its prompts go on with the other approvers. Keep it longer than --approver-ping and well under --prompt-timeout"}, Field: func(c *Config) any { return &c.ApproverSilence }},
	{Flag: clidoc.Flag{Name: "exec-timeout", Default: DefaultExecTimeout, Usage: "run time limit; a request may only lower it"}, Field: func(c *Config) any { return &c.ExecTimeout }},
	{Flag: clidoc.Flag{Name: "kill-grace", Default: pipeline.DefaultKillGrace, Usage: "time between SIGTERM and SIGKILL when a run is stopped"}, Field: func(c *Config) any { return &c.KillGrace }},
	{Flag: clidoc.Flag{Name: "max-skew", Default: DefaultMaxSkew, Usage: "largest accepted distance between a request's time and the clock"}, Field: func(c *Config) any { return &c.MaxSkew }},
	{Flag: clidoc.Flag{Name: "max-runs", Default: DefaultMaxRuns, Usage: "approved runs in progress at once; a uid other than root holds at most half of them (at least 1), its further runs waiting for its own"}, Field: func(c *Config) any { return &c.MaxRuns }},
	{Flag: clidoc.Flag{Name: "max-conns", Default: DefaultMaxConns, Usage: "connections in flight before \"server busy\""}, Field: func(c *Config) any { return &c.MaxConns }},
	{Flag: clidoc.Flag{Name: "max-conns-per-uid", Default: 0, Usage: "connections of one uid (root excepted) in flight before \"server busy\"; 0 means a quarter of --max-conns"}, Field: func(c *Config) any { return &c.MaxConnsPerUID }, ZeroKept: true},
	{Flag: clidoc.Flag{Name: "first-byte-timeout", Default: DefaultFirstByteTimeout, Usage: "how long a connection may send nothing before it is answered with an error and closed"}, Field: func(c *Config) any { return &c.FirstByteTimeout }},
	{Flag: clidoc.Flag{Name: "read-timeout", Default: DefaultReadTimeout, Usage: "how long a connection has, from connecting, to send its whole request line before it is answered with an error and closed"}, Field: func(c *Config) any { return &c.ReadTimeout }},
	{Flag: clidoc.Flag{Name: "stall-timeout", Default: DefaultStallTimeout, Usage: "how long a client may leave its answer unread before its connection is dropped"}, Field: func(c *Config) any { return &c.StallTimeout }},
	{Flag: clidoc.Flag{Name: "max-requests-per-uid", Default: DefaultMaxRequestsPerUID, Usage: "requests of one uid (root excepted) within the replay window (2 × --max-skew), each of whose ids it remembers; more are refused"}, Field: func(c *Config) any { return &c.MaxRequestsPerUID }},
	{Flag: clidoc.Flag{Name: "max-pending", Default: DefaultMaxPending, Usage: "requests of one uid waiting for a person's decision at once; more are refused"}, Field: func(c *Config) any { return &c.MaxPending }},
	{Flag: clidoc.Flag{Name: "prompt-rate", Default: DefaultPromptRate, Usage: "requests of one uid put to a person per minute; more are refused"}, Field: func(c *Config) any { return &c.PromptRate }},
	{Flag: clidoc.Flag{Name: "audit-min-free", Default: clidoc.Size(DefaultAuditMinFree), Usage: "refuse requests while the audit log's file system has less than this `size` free (bytes, or with K, M or G); 0 turns the guard off"}, Field: func(c *Config) any { return &c.AuditMinFree }, ZeroKept: true},
	{Flag: clidoc.Flag{Name: "audit-reject-rate", Default: DefaultAuditRejectRate, Usage: "rejected requests of one uid (root excepted) recorded per minute; past it they are counted in one dropped record"}, Field: func(c *Config) any { return &c.AuditRejectRate }},
	{Flag: clidoc.Flag{Name: "audit-uid-budget", Default: clidoc.Size(DefaultAuditUIDBudget), Usage: "audit records the requests of one uid (root excepted) may add an hour, from its first (`size` in bytes, or with K, M or G; at least 64K); past it its requests that may run or reach a person are refused (server busy) until the hour ends, and its received records are full only within a quarter of it"}, Field: func(c *Config) any { return &c.AuditUIDBudget }},
}
