// Admins: register a greenhouse (POST /api/greenhouses) and see the ones under control.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.querySelector("#registered tbody");
  const msg = document.getElementById("gh-msg");
  const say = (text, bad) => { msg.textContent = text; msg.className = "msg" + (bad ? " bad-text" : ""); };
  const value = (id) => document.getElementById(id).value.trim();
  async function load() {
    const rows = await GT.api("GET", "/api/greenhouses");
    body.replaceChildren();
    for (const g of rows) {
      const last = GT.el("td"); GT.time(last, g.last_decision ? g.last_decision.ts : null);
      const tr = GT.el("tr"); tr.dataset.gh = g.id;
      const name = GT.el("td"); const a = GT.el("a", "gh-link", g.name); a.href = "/greenhouses/" + g.id; name.append(a);
      tr.append(name, GT.el("td", "mono", g.id), GT.el("td", "", String(g.zones)), GT.el("td", "", GT.label("badge.mode.", g.mode)),
        GT.el("td", "mono", g.policy_version), last);
      body.append(tr);
    }
  }
  document.getElementById("add-greenhouse").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { id: value("gh-id"), zones: Number(value("gh-zones")), soil: value("gh-soil"),
      daily_water_cap_l: Number(value("gh-cap")) };
    if (value("gh-name")) { body.name = value("gh-name"); }
    try {
      const g = await GT.api("POST", "/api/greenhouses", body);
      say(GT.t("page.registration.done", { id: g.id, name: g.name, zones: g.zones }));
      load().catch(() => {});
    } catch (e) { say(e.message, true); }
  });
  load().catch((e) => say(e.message, true));
});
