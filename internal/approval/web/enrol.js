"use strict";
const enc = buf => { let s = ""; for (const c of new Uint8Array(buf)) s += String.fromCharCode(c); return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""); };
const dec = s => { s = s.replace(/-/g, "+").replace(/_/g, "/"); while (s.length % 4) s += "="; return Uint8Array.from(atob(s), c => c.charCodeAt(0)); };
const $ = id => document.getElementById(id);
const base = location.pathname.replace(/\/$/, "");
let info, attested;
fetch(base + "/options").then(r => r.json()).then(j => {
  info = j;
  $("rp").textContent = j.rp_id;
  $("name").textContent = j.name;
  $(j.confirm ? "step-confirm" : "step-console").hidden = false;
});
// The fingerprint of the passkey's authenticator data, as rootgated
// computes it (passkey.Fingerprint): the first 8 bytes of its SHA-256.
const fingerprint = async authData => {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", authData));
  const x = Array.from(h.slice(0, 8), b => b.toString(16).padStart(2, "0")).join("");
  return x.slice(0, 4) + " " + x.slice(4, 8) + " " + x.slice(8, 12) + " " + x.slice(12, 16);
};
const post = async (what, body) => {
  const r = await fetch(base + "/" + what, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const t = await r.text();
  let j;
  try { j = JSON.parse(t); } catch { j = { error: t.trim() }; }
  if (!r.ok) throw new Error(j.error);
  return j;
};
const done = id => { $("status").textContent = ""; $("msg").textContent = "enrolled: " + id; $("msg").id = "done"; };
const fail = e => { $("msg").textContent = "not enrolled: " + e.message; };
$("go").onclick = async () => {
  $("go").disabled = true;
  $("msg").textContent = "";
  try {
    const o = JSON.parse(info.options);
    o.challenge = dec(o.challenge);
    o.user.id = dec(o.user.id);
    for (const c of o.excludeCredentials || []) c.id = dec(c.id);
    const c = await navigator.credentials.create({ publicKey: o });
    const fp = c.response.getAuthenticatorData ? await fingerprint(c.response.getAuthenticatorData()) : "unknown";
    $("fp").textContent = fp;
    $("made").hidden = false;
    const att = { id: c.id, rawId: enc(c.rawId), type: c.type, clientExtensionResults: {},
      response: { attestationObject: enc(c.response.attestationObject), clientDataJSON: enc(c.response.clientDataJSON),
        transports: c.response.getTransports ? c.response.getTransports() : [] } };
    attested = await post("attest", { attestation: JSON.stringify(att) });
    $("gotid").textContent = attested.id;
    $("gotfp").textContent = attested.fingerprint;
    $("got").hidden = false;
    if (attested.fingerprint !== fp) {
      throw new Error("rootgated received another passkey than the one this device made: do not confirm it" + (info.confirm ? "" : "; answer n on root's terminal"));
    }
    if (info.confirm) {
      $("confirm-go").hidden = false;
      $("confirm-go").disabled = false;
      return;
    }
    $("status").textContent = "Now answer on root's terminal, where rootgate passkeys add runs: y if it shows fingerprint " + fp + ", n otherwise.";
    done((await post("finish", {})).id);
  } catch (e) {
    fail(e);
  }
};
$("confirm-go").onclick = async () => {
  $("confirm-go").disabled = true;
  try {
    const a = await navigator.credentials.get({ publicKey: { challenge: dec(attested.challenge), rpId: attested.rp_id, userVerification: "required",
      allowCredentials: attested.credentials.map(id => ({ type: "public-key", id: dec(id) })) } });
    const assertion = { credential_id: enc(a.rawId), authenticator_data: enc(a.response.authenticatorData), client_data: enc(a.response.clientDataJSON), signature: enc(a.response.signature) };
    if (a.response.userHandle && a.response.userHandle.byteLength) assertion.user_handle = enc(a.response.userHandle);
    done((await post("finish", { assertion })).id);
  } catch (e) {
    fail(e);
  }
};
