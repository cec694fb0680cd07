// An MCP client built on the official TypeScript SDK, run against the real
// `rootgate mcp` by TestMCPTypeScriptClient (cmd/rootgate). It stands for
// the clients agents run in: a request timeout (here 3 s, standing for
// the SDK's 60 s default) that cancels the tool call when it passes.
//
// usage: node client.mjs ROOTGATE_BIN SOCKET DIR
// It exits 0 when every check holds, else prints FAIL: and exits 1.
import fs from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { Ajv } from "ajv";

const [bin, sock, dir] = process.argv.slice(2);
const TIMEOUT = 3000; // the client's request timeout, in milliseconds

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exit(1);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function poll(what, cond, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await sleep(20);
  }
  fail("timed out waiting for " + what);
}

const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp", "--socket", sock, "--wait", "2s", "--progress-interval", "200ms"],
  env: { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: "/" },
  stderr: "inherit",
});
const client = new Client({ name: "ts-e2e", version: "1.0.0" });
await client.connect(transport);

// Every tool's schemas compile; every structured result is validated
// against its tool's published output schema.
const { tools } = await client.listTools();
const ajv = new Ajv({ strict: true, allErrors: true });
const validate = {};
for (const t of tools) {
  check(t.outputSchema, `${t.name} has no output schema`);
  ajv.compile(t.inputSchema);
  validate[t.name] = ajv.compile(t.outputSchema);
}
for (const name of ["execute", "wait", "cancel", "output", "ping"]) check(validate[name], `no tool ${name}`);
let validated = 0;

async function call(name, args, opts = {}) {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: TIMEOUT, ...opts });
  check(res.structuredContent, `${name}: no structuredContent`);
  if (!validate[name](res.structuredContent)) {
    fail(`${name}: result does not match the output schema: ${ajv.errorsText(validate[name].errors)}\n${JSON.stringify(res.structuredContent)}`);
  }
  validated++;
  check(res.content.length === 1 && res.content[0].type === "text", `${name}: content ${JSON.stringify(res.content)}`);
  return { res, r: res.structuredContent, text: res.content[0].text };
}

// waitDone calls wait until the call is no longer pending.
async function waitDone(id, opts = {}) {
  for (;;) {
    const { res, r } = await call("wait", { id }, opts);
    if (r.status !== "pending") return { res, r };
  }
}

// 1. Progress names the phase: a person is asked, then the command runs.
{
  const notes = [];
  const onprogress = (p) => {
    notes.push(p.message);
    if (p.message.startsWith("waiting for a person to approve it")) fs.writeFileSync(dir + "/saw-approval", "");
  };
  let { r } = await call("execute", { argv: ["env", "ASKME=1", "sh", "-c", "echo approved; sleep 1"], reason: "ts e2e: ask a person" }, { onprogress });
  if (r.status === "pending") ({ r } = await waitDone(r.id, { onprogress }));
  check(r.status === "ok" && r.stdout.text === "approved\n", `approved run: ${JSON.stringify(r)}`);
  check(notes.some((m) => /^waiting for a person to approve it \(host local, sent \d+s ago\)$/.test(m)), `no approval progress in ${JSON.stringify(notes)}`);
  check(notes.some((m) => /^approved and running \(host local, sent \d+s ago\)$/.test(m)), `no running progress in ${JSON.stringify(notes)}`);
  console.log("progress named the phases: " + JSON.stringify([...new Set(notes.map((m) => m.replace(/\d+s/g, "Ns")))]));
}

// 2. A run longer than the client's request timeout completes, with its
// output, even though a wait call timed out (and was cancelled) on the way.
{
  const start = Date.now();
  const { r, res } = await call("execute", { argv: ["sh", "-c", "echo begin; sleep 5; echo end"], reason: "ts e2e: longer than the timeout" });
  check(r.status === "pending" && !res.isError, `execute of a long run: ${JSON.stringify(r)}`);
  let timedOut = false;
  try {
    await call("wait", { id: r.id, wait: 10 }, { timeout: 1000 });
  } catch (e) {
    timedOut = e instanceof McpError && e.code === ErrorCode.RequestTimeout;
  }
  check(timedOut, "the wait call did not time out in the client");
  const done = await waitDone(r.id);
  const took = Date.now() - start;
  check(done.r.status === "ok" && done.r.stdout.text === "begin\nend\n" && done.r.exit_code === 0 && !done.res.isError, `long run: ${JSON.stringify(done.r)}`);
  check(took > TIMEOUT, `the run took ${took} ms, not longer than the client's timeout`);
  console.log(`a run of ${took} ms outlived the client's ${TIMEOUT} ms request timeout`);
}

// 3. cancel kills the run's whole process tree.
{
  const pidFile = dir + "/pid";
  const { r } = await call("execute", { argv: ["sh", "-c", `sleep 300 & echo $! > ${pidFile}; wait`], reason: "ts e2e: cancel me" });
  check(r.status === "pending", `execute of a run to cancel: ${JSON.stringify(r)}`);
  let pid = 0;
  await poll("the pid file", () => {
    try {
      const s = fs.readFileSync(pidFile, "utf8");
      if (s.endsWith("\n")) pid = Number(s.trim());
    } catch {}
    return pid > 0;
  });
  check(fs.existsSync(`/proc/${pid}`), `the background sleep ${pid} is not running`);
  const c = await call("cancel", { id: r.id });
  check(c.r.status === "error" && c.r.message.startsWith("cancelled with the cancel tool") && c.res.isError, `cancel: ${JSON.stringify(c.r)}`);
  await poll(`process ${pid} to be gone`, () => !fs.existsSync(`/proc/${pid}`));
  console.log(`cancel killed process ${pid}`);
}

// 4. Long output: the result shows head and tail, and the output tool
// reads the rest in ranges, without running anything again.
{
  let full = "";
  for (let i = 1; i <= 20000; i++) full += i + "\n";
  const { r, text } = await call("execute", { argv: ["seq", "20000"], reason: "ts e2e: long output" });
  check(r.status === "ok" && r.stdout.bytes === full.length && r.stdout.omitted_lines > 0, `seq: ${JSON.stringify({ ...r, stdout: { ...r.stdout, text: undefined } })}`);
  check(text.length < 45000, `the result's text is ${text.length} characters`);
  const m = /\[\.\.\. lines \d+ to \d+ of 20000 \(\d+ bytes\) cut here by rootgate mcp; read them with the output tool: (\{[^}]*\}) \.\.\.\]\n/.exec(r.stdout.text);
  check(m, "no cut marker in stdout");
  const head = r.stdout.text.slice(0, m.index);
  const tail = r.stdout.text.slice(m.index + m[0].length);
  const args = JSON.parse(m[1]);
  let middle = "";
  let reads = 0;
  for (let from = args.from; from < args.from + args.count; reads++) {
    const o = await call("output", { ...args, from, count: args.from + args.count - from });
    check(!o.res.isError && o.r.from === from && o.r.text.length > 0, `output from ${from}: ${JSON.stringify(o.r)}`);
    middle += o.r.text;
    from = o.r.to + 1;
  }
  check(head + middle + tail === full, "head, the ranges read and tail do not make the output");
  const b = await call("output", { id: r.id, unit: "bytes", from: 1001, count: 7 });
  check(b.r.text === full.slice(1000, 1007) && b.r.next_from === 1008, `bytes range: ${JSON.stringify(b.r)}`);
  console.log(`read ${args.count} cut lines back in ${reads} ranges`);
}

await client.close();
console.log(`ok: ${validated} structured results matched their output schemas`);
