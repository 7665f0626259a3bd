// Admins: accounts and roles. Generated passwords are shown once, here, and nowhere else.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.querySelector("#users tbody");
  const msg = document.getElementById("users-msg");
  const say = (text, bad) => { msg.textContent = text; msg.className = "msg" + (bad ? " bad-text" : ""); };
  const t = GT.t;
  const told = (r) => say(t("page.users.password", { user: r.username, password: r.password }));
  async function act(fn) { try { await fn(); await load(); } catch (e) { say(e.message, true); } }
  async function load() {
    const [rows, locks] = await Promise.all([GT.api("GET", "/api/users"), GT.api("GET", "/api/lockouts")]);
    const lockedUntil = new Map(locks.map((l) => [l.username, l.locked_until]));
    body.replaceChildren();
    for (const u of rows) {
      const tr = GT.el("tr", u.disabled ? "acked" : ""); tr.dataset.user = u.username;
      const last = GT.el("td"); GT.time(last, u.last_login_at);
      const actions = GT.el("td");
      const reset = GT.el("button", "btn btn-small", t("page.users.reset")); reset.type = "button";
      reset.addEventListener("click", () => act(async () => told(await GT.api("POST", `/api/users/${encodeURIComponent(u.username)}/password`))));
      actions.append(reset);
      const until = lockedUntil.get(u.username);
      if (until) {
        const lift = GT.el("button", "btn btn-small", t("page.users.unlock")); lift.type = "button";
        lift.addEventListener("click", () => act(async () => {
          await GT.api("POST", `/api/users/${encodeURIComponent(u.username)}/unlock`); say(t("page.users.unlocked", { user: u.username }));
        }));
        actions.append(" ", lift);
      }
      if (!u.disabled) {
        const off = GT.el("button", "btn btn-small", t("page.users.disable")); off.type = "button";
        off.addEventListener("click", () => act(async () => {
          if (!confirm(t("page.users.confirm_disable", { user: u.username }))) { return; }
          await GT.api("POST", `/api/users/${encodeURIComponent(u.username)}/disable`); say(t("page.users.disabled", { user: u.username }));
        }));
        actions.append(" ", off);
      }
      const status = GT.el("td", "", t(u.disabled ? "badge.user.disabled" : "badge.user.active"));
      if (until) { status.append(` (${t("page.users.locked_until")} `); const at = GT.el("span"); GT.time(at, until); status.append(at, ")"); }
      const roles = u.roles.map((r) => GT.label("page.role.", r)).join(t("list.sep"));
      tr.append(GT.el("td", "mono", u.username), GT.el("td", "", roles), status, last, actions);
      body.append(tr);
    }
  }
  document.getElementById("add-user").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const roles = [...document.querySelectorAll("input[name=role]:checked")].map((i) => i.value);
    if (!roles.length) { say(t("page.users.pick_role"), true); return; }
    act(async () => told(await GT.api("POST", "/api/users", { username: document.getElementById("new-username").value.trim(), roles })));
  });
  load().catch((e) => say(e.message, true));
});
