// The rootgate approval page. Every text from a request is put into the
// page with textContent, never as markup.
"use strict";
const shown = new Map(); // key → {el, first}
const b64u = {
  enc(buf) {
    const b = new Uint8Array(buf);
    let s = "";
    for (const c of b) s += String.fromCharCode(c);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  },
  dec(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    return Uint8Array.from(atob(s), c => c.charCodeAt(0));
  },
};
async function post(path, body) {
  const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
async function approve(p, item, grant, anything) {
  const msg = item.querySelector(".msg");
  msg.textContent = "";
  try {
    const { challenge } = await post("challenge", { key: p.key, grant, grant_runs_anything: anything });
    const cred = await navigator.credentials.get({ publicKey: {
      challenge: b64u.dec(challenge), rpId: p.rp_id, userVerification: "required",
      allowCredentials: (p.credentials || []).map(id => ({ type: "public-key", id: b64u.dec(id) })),
      timeout: Math.max(1000, p.deadline - Date.now()),
    } });
    const r = cred.response;
    const assertion = {
      credential_id: b64u.enc(cred.rawId), authenticator_data: b64u.enc(r.authenticatorData),
      client_data: b64u.enc(r.clientDataJSON), signature: b64u.enc(r.signature),
    };
    if (r.userHandle && r.userHandle.byteLength) assertion.user_handle = b64u.enc(r.userHandle);
    await post("decide", { key: p.key, approve: true, grant, grant_runs_anything: anything, assertion });
    document.getElementById("log").textContent = "approved: " + p.id;
  } catch (e) {
    msg.textContent = "not approved: " + e.message;
  }
}
async function deny(p, item) {
  try {
    await post("decide", { key: p.key, approve: false });
    document.getElementById("log").textContent = "denied: " + p.id;
  } catch (e) {
    item.querySelector(".msg").textContent = "not denied: " + e.message;
  }
}
function render(p) {
  const item = el("div", { class: "req", "data-key": p.key, "data-id": p.id });
  item.append(el("p", {}, "from rootgated on host " + (p.host || "(unnamed)") + " at " + p.socket));
  if (p.count > 1) item.append(el("p", { class: "q" }, "ONE ANSWER DECIDES " + p.count + " IDENTICAL REQUESTS"));
  if (p.own) item.append(el("p", { class: "own" }, "FROM YOUR OWN ACCOUNT (the uid this page runs as): your terminals are never asked about it; only your passkey approves it"));
  const pre = el("pre", { class: "text" }, p.text);
  item.append(pre);
  // As at the terminal, a request taller than its box is read to its end
  // before Approve works.
  pre.onscroll = () => { if (pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 2) item.dataset.seen = "1"; };
  item.append(el("p", { class: "q" }, p.question));
  const left = el("p", { class: "left" });
  item.append(left);
  const yes = el("button", { class: "approve", disabled: "" }, "Approve with passkey");
  const cur = () => (shown.get(p.key) || { p }).p; // the newest state of it: nonce, credentials
  yes.onclick = () => approve(cur(), item, 0, false);
  const no = el("button", { class: "deny" }, "Deny");
  no.onclick = () => deny(p, item);
  item.append(yes, no);
  const g = el("p", { class: "grant" });
  if (p.no_grant) {
    g.textContent = "No standing grant: " + p.no_grant;
  } else {
    const sel = el("select", { class: "grant-for" });
    for (const [s, t] of [[900, "15 minutes"], [3600, "1 hour"], [28800, "8 hours"]]) sel.append(el("option", { value: s }, t));
    const any = el("input", { type: "checkbox", class: "grant-anything" });
    const gb = el("button", { class: "grant-approve", disabled: "" }, "Approve and grant");
    gb.onclick = () => {
      if (p.anything && !any.checked) { item.querySelector(".msg").textContent = "confirm that this runs anything first"; return; }
      approve(cur(), item, Number(sel.value), p.anything);
    };
    g.append(el("span", {}, "Standing grant: requests exactly like this one (same requester, command, files, cwd, env, stdin, run-as) run without asking for "), sel, gb);
    if (p.anything) g.append(el("br"), any, el("span", {}, " I know this runs an interpreter or command runner: the grant lets it run anything"));
  }
  item.append(g, el("p", { class: "msg" }));
  return item;
}
function tick() {
  const now = Date.now();
  for (const [, s] of shown) {
    const p = s.p;
    const ms = p.deadline - now;
    const pre = s.el.querySelector("pre.text");
    if (pre.scrollHeight <= pre.clientHeight + 2) s.el.dataset.seen = "1";
    s.el.querySelector(".left").textContent = (ms > 0 ? "times out in " + Math.ceil(ms / 1000) + " s" : "timed out") +
      (s.el.dataset.seen === "1" ? "" : "; scroll the request to its end to approve");
    const ready = now - s.first >= p.dwell_ms && s.el.dataset.seen === "1";
    for (const b of s.el.querySelectorAll(".approve, .grant-approve")) b.disabled = !ready || ms <= 0;
  }
}
function update(st) {
  const list = document.getElementById("list");
  const keys = new Set(st.prompts.map(p => p.key));
  for (const [k, s] of shown) if (!keys.has(k)) { s.el.remove(); shown.delete(k); }
  for (const p of st.prompts) {
    if (shown.has(p.key)) { shown.get(p.key).p = p; continue; }
    const e = render(p);
    list.append(e);
    shown.set(p.key, { el: e, p, first: Date.now() });
  }
  document.getElementById("none").hidden = st.prompts.length > 0;
  const ul = document.getElementById("notices");
  ul.replaceChildren(...(st.notices || []).map(n => el("li", {}, new Date(n.time).toLocaleString() + ", host " + (n.host || "(unnamed)") + ": " + n.text)));
  tick();
}
const es = new EventSource("events");
es.onopen = () => { document.getElementById("conn").textContent = "live"; };
es.onerror = () => { document.getElementById("conn").textContent = "reconnecting…"; };
es.onmessage = ev => update(JSON.parse(ev.data));
setInterval(tick, 250);
