#!/bin/sh
# capture.sh: record how the real MCP clients treat rootgate's tools, and
# write what TestMCPClientsAsRecorded replays (README.md here says what
# each file holds). Run it as root from the repository's root, with Go,
# node 20 and npm, and the npm registry reachable:
#
#   sh cmd/rootgate/testdata/mcpclients/capture.sh [WORKDIR]
#
# It installs the clients into WORKDIR (a new temporary directory unless
# given; never into the repository), builds rootgate, rootgated and
# cmd/mcpcapture there, starts rootgated on a socket of its own with a
# policy that allows every command, and drives each client headless with
# its model endpoint pointed at the stand-in (mcpcapture model) and
# rootgate's MCP server wrapped in mcpcapture proxy. The clients are set
# up as docs/agents.md says. Set CLAUDE_CODE, CODEX and GEMINI_CLI to npm
# version specs to pin them (default: latest), and CLIENTS to capture only
# some of them (default: "claude-code codex-cli gemini-cli").
set -eu

repo=$(pwd)
out=$repo/cmd/rootgate/testdata/mcpclients
[ -f "$out/capture.sh" ] || { echo "capture.sh: run it from the repository's root" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "capture.sh: run it as root (it starts rootgated)" >&2; exit 1; }
work=${1:-$(mktemp -d /tmp/mcpcapture.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "capture.sh: working in $work"

pids=""
stop() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap stop EXIT INT TERM

# The clients, as npm serves them.
(cd "$work" && [ -f package.json ] || npm init -y >/dev/null)
(cd "$work" && npm install --no-audit --no-fund \
	"@anthropic-ai/claude-code@${CLAUDE_CODE:-latest}" \
	"@openai/codex@${CODEX:-latest}" \
	"@google/gemini-cli@${GEMINI_CLI:-latest}" >"$work/npm.log" 2>&1) ||
	{ cat "$work/npm.log" >&2; exit 1; }
npmbin=$work/node_modules/.bin

bin=$work/bin
go build -o "$bin/" ./cmd/rootgate ./cmd/rootgated ./cmd/mcpcapture

# rootgated on a socket of its own; the policy allows everything, so no
# person is asked while capturing.
d=$work/daemon
rm -rf "$d" && mkdir -p "$d"
printf 'allow any,env=LANG\n' >"$d/policy"
chmod 600 "$d/policy"
"$bin/rootgated" --socket "$d/s" --approver-socket "$d/a" --runtime-dir "$d/run" \
	--policy "$d/policy" --audit "$d/audit.jsonl" --cgroup none 2>"$d/log" &
pids="$pids $!"
i=0
until "$bin/rootgate" ping --socket "$d/s" >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 100 ] || { cat "$d/log" >&2; exit 1; }
	sleep 0.1
done

# model NAME: start the stand-in model for client NAME; sets $model (its
# base URL) and $cap (the client's capture directory).
model() {
	cap=$work/cap/$1
	rm -rf "$cap" && mkdir -p "$cap"
	"$bin/mcpcapture" model -listen 127.0.0.1:0 -addr-file "$cap/addr" -dir "$cap/model" \
		-rootgate "$bin/rootgate" -socket "$d/s" 2>"$cap/model.log" &
	modelpid=$!
	pids="$pids $modelpid"
	i=0
	until [ -s "$cap/addr" ]; do
		i=$((i + 1))
		[ $i -lt 100 ] || { cat "$cap/model.log" >&2; exit 1; }
		sleep 0.1
	done
	model=http://$(cat "$cap/addr")
}

# The MCP server each client starts: rootgate mcp behind the logging proxy.
server() { echo "$bin/mcpcapture proxy -log $cap/mcp.jsonl $bin/rootgate mcp --socket $d/s"; }

# record NAME LABEL: write NAME.json and raw/NAME/ from the capture.
record() {
	"$bin/mcpcapture" record -client "$2" -model "$cap/model" -mcp "$cap/mcp.jsonl" \
		-raw "$out/raw/$1" >"$cap/recording.json"
	mv "$cap/recording.json" "$out/$1.json"
	kill "$modelpid"
	echo "capture.sh: recorded $2 in $out/$1.json"
}

want() { case " ${CLIENTS:-claude-code codex-cli gemini-cli} " in *" $1 "*) return 0 ;; esac; return 1; }

# Claude Code: a project's .mcp.json (claude mcp add --scope project) and
# its .claude/settings.json allowing rootgate's tools, the project trusted
# (as accepting the dialog of the first interactive start records it:
# Claude Code ignores a project's permissions until then); claude -p.
if want claude-code; then
model claude-code
proj=$work/proj-claude-code
rm -rf "$proj" "$work/home-claude-code" && mkdir -p "$proj/.claude" "$work/home-claude-code"
cat >"$proj/.claude/settings.json" <<'EOF'
{
  "permissions": {
    "allow": ["mcp__rootgate__ping", "mcp__rootgate__check", "mcp__rootgate__execute",
              "mcp__rootgate__wait", "mcp__rootgate__cancel", "mcp__rootgate__output"]
  }
}
EOF
ver=$("$npmbin/claude" --version | cut -d' ' -f1)
(
	cd "$proj"
	export HOME="$work/home-claude-code" ANTHROPIC_BASE_URL="$model" ANTHROPIC_API_KEY=sk-ant-stand-in \
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
	# shellcheck disable=SC2046
	"$npmbin/claude" mcp add --scope project rootgate -- $(server) >"$cap/add.log" 2>&1
	"$npmbin/claude" mcp list >"$cap/list.log" 2>&1 || true
	node -e '
		const fs = require("fs"), f = process.env.HOME + "/.claude.json";
		const c = JSON.parse(fs.readFileSync(f, "utf8"));
		c.projects = c.projects || {};
		c.projects[process.cwd()] = Object.assign(c.projects[process.cwd()] || {}, {hasTrustDialogAccepted: true});
		fs.writeFileSync(f, JSON.stringify(c, null, 2));'
	"$npmbin/claude" -p "Use rootgate's tools." --output-format stream-json --verbose >"$cap/run.jsonl" 2>"$cap/run.err"
)
record claude-code "Claude Code $ver"
fi

# Codex: CODEX_HOME's config.toml with a model provider for the stand-in,
# the server, and approval_mode "approve" for the tools that say
# destructiveHint (execute, cancel); codex exec.
if want codex-cli; then
model codex-cli
proj=$work/proj-codex-cli
home=$work/home-codex-cli
rm -rf "$proj" "$home" && mkdir -p "$proj" "$home"
cat >"$home/config.toml" <<EOF
model = "stand-in"
model_provider = "stand-in"

[model_providers.stand-in]
name = "stand-in"
base_url = "$model/v1"
wire_api = "responses"
env_key = "STAND_IN_API_KEY"

[mcp_servers.rootgate]
command = "$bin/mcpcapture"
args = ["proxy", "-log", "$cap/mcp.jsonl", "$bin/rootgate", "mcp", "--socket", "$d/s"]

[mcp_servers.rootgate.tools.execute]
approval_mode = "approve"

[mcp_servers.rootgate.tools.cancel]
approval_mode = "approve"
EOF
ver=$(HOME=$home CODEX_HOME=$home "$npmbin/codex" --version | sed 's/^codex-cli //')
(
	cd "$proj"
	export HOME="$home" CODEX_HOME="$home" STAND_IN_API_KEY=stand-in
	"$npmbin/codex" exec --skip-git-repo-check "Use rootgate's tools." >"$cap/run.out" 2>"$cap/run.err" </dev/null
)
record codex-cli "OpenAI Codex CLI $ver"
fi

# Gemini CLI: the project's .gemini/settings.json (gemini mcp add --scope
# project --trust), the project folder trusted; gemini -p, without
# --approval-mode yolo.
if want gemini-cli; then
model gemini-cli
proj=$work/proj-gemini-cli
home=$work/home-gemini-cli
rm -rf "$proj" "$home" && mkdir -p "$proj" "$home/.gemini"
cat >"$home/.gemini/settings.json" <<'EOF'
{"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": false}, "general": {"disableAutoUpdate": true}}
EOF
printf '{"%s": "TRUST_FOLDER"}\n' "$proj" >"$home/.gemini/trustedFolders.json"
ver=$(HOME=$home "$npmbin/gemini" --version)
(
	cd "$proj"
	export HOME="$home" GEMINI_API_KEY=stand-in GOOGLE_GEMINI_BASE_URL="$model"
	# shellcheck disable=SC2046
	"$npmbin/gemini" mcp add --scope project --trust rootgate $(server) >"$cap/add.log" 2>&1
	"$npmbin/gemini" -p "Use rootgate's tools." >"$cap/run.out" 2>"$cap/run.err" </dev/null
)
record gemini-cli "Gemini CLI $ver"
fi

echo "capture.sh: done; the clients' own output is under $work/cap"
