"use strict";
const enc = buf => { let s = ""; for (const c of new Uint8Array(buf)) s += String.fromCharCode(c); return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""); };
const dec = s => { s = s.replace(/-/g, "+").replace(/_/g, "/"); while (s.length % 4) s += "="; return Uint8Array.from(atob(s), c => c.charCodeAt(0)); };
const base = location.pathname.replace(/\/$/, "");
let info;
fetch(base + "/options").then(r => r.json()).then(j => {
  info = j;
  document.getElementById("rp").textContent = j.rp_id;
  document.getElementById("name").textContent = j.name;
  document.getElementById("confirm").hidden = !j.confirm;
});
document.getElementById("go").onclick = async () => {
  const msg = document.getElementById("msg");
  msg.textContent = "";
  try {
    const body = {};
    if (info.confirm) {
      const a = await navigator.credentials.get({ publicKey: { challenge: dec(info.confirm_challenge), rpId: info.rp_id, userVerification: "required",
        allowCredentials: info.credentials.map(id => ({ type: "public-key", id: dec(id) })) } });
      body.assertion = { credential_id: enc(a.rawId), authenticator_data: enc(a.response.authenticatorData), client_data: enc(a.response.clientDataJSON), signature: enc(a.response.signature) };
      if (a.response.userHandle && a.response.userHandle.byteLength) body.assertion.user_handle = enc(a.response.userHandle);
    }
    const o = JSON.parse(info.options);
    o.challenge = dec(o.challenge);
    o.user.id = dec(o.user.id);
    for (const c of o.excludeCredentials || []) c.id = dec(c.id);
    const c = await navigator.credentials.create({ publicKey: o });
    const att = { id: c.id, rawId: enc(c.rawId), type: c.type, clientExtensionResults: {},
      response: { attestationObject: enc(c.response.attestationObject), clientDataJSON: enc(c.response.clientDataJSON),
        transports: c.response.getTransports ? c.response.getTransports() : [] } };
    body.attestation = JSON.stringify(att);
    const r = await fetch(base + "/finish", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error);
    msg.textContent = "enrolled: " + j.id;
    msg.id = "done";
  } catch (e) {
    msg.textContent = "not enrolled: " + e.message;
  }
};
