// Admins: accounts and roles. Generated passwords are shown once, here, and nowhere else.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.querySelector("#users tbody");
  const msg = document.getElementById("users-msg");
  const say = (text, bad) => { msg.textContent = text; msg.className = "msg" + (bad ? " bad-text" : ""); };
  const told = (r) => say(`Password for ${r.username} (shown once, pass it on securely): ${r.password}`);
  async function act(fn) { try { await fn(); await load(); } catch (e) { say(e.message, true); } }
  async function load() {
    const [rows, locks] = await Promise.all([GT.api("GET", "/api/users"), GT.api("GET", "/api/lockouts")]);
    const lockedUntil = new Map(locks.map((l) => [l.username, l.locked_until]));
    body.replaceChildren();
    for (const u of rows) {
      const tr = GT.el("tr", u.disabled ? "acked" : ""); tr.dataset.user = u.username;
      const last = GT.el("td"); GT.time(last, u.last_login_at);
      const actions = GT.el("td");
      const reset = GT.el("button", "btn btn-small", "Reset password"); reset.type = "button";
      reset.addEventListener("click", () => act(async () => told(await GT.api("POST", `/api/users/${encodeURIComponent(u.username)}/password`))));
      actions.append(reset);
      const until = lockedUntil.get(u.username);
      if (until) {
        const lift = GT.el("button", "btn btn-small", "Unlock"); lift.type = "button";
        lift.addEventListener("click", () => act(async () => {
          await GT.api("POST", `/api/users/${encodeURIComponent(u.username)}/unlock`); say(`${u.username} unlocked.`);
        }));
        actions.append(" ", lift);
      }
      if (!u.disabled) {
        const off = GT.el("button", "btn btn-small", "Disable"); off.type = "button";
        off.addEventListener("click", () => act(async () => {
          if (!confirm(`Disable ${u.username}? Their sessions end at once.`)) { return; }
          await GT.api("POST", `/api/users/${encodeURIComponent(u.username)}/disable`); say(`${u.username} disabled.`);
        }));
        actions.append(" ", off);
      }
      const status = GT.el("td", "", u.disabled ? "disabled" : "active");
      if (until) { status.append(" (login locked until "); const t = GT.el("span"); GT.time(t, until); status.append(t, ")"); }
      tr.append(GT.el("td", "mono", u.username), GT.el("td", "", u.roles.join(", ")), status, last, actions);
      body.append(tr);
    }
  }
  document.getElementById("add-user").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const roles = [...document.querySelectorAll("input[name=role]:checked")].map((i) => i.value);
    if (!roles.length) { say("Pick at least one role.", true); return; }
    act(async () => told(await GT.api("POST", "/api/users", { username: document.getElementById("new-username").value.trim(), roles })));
  });
  load().catch((e) => say(e.message, true));
});
