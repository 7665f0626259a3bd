"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("alarms");
  const body = table.querySelector("tbody");
  const operator = table.dataset.operator === "yes";
  async function load() {
    const rows = await GT.api("GET", "/api/alarms");
    body.replaceChildren();
    if (!rows.length) { const tr = GT.el("tr"); const td = GT.el("td", "muted", "No alarms."); td.colSpan = 7; tr.append(td); body.append(tr); }
    for (const a of rows) {
      const tr = GT.el("tr", a.acknowledged ? "acked" : "unacked sev-" + a.severity);
      tr.dataset.alarm = a.id;
      const sev = GT.el("td"); sev.append(GT.el("span", "badge " + (a.severity === "critical" ? "bad" : "warn"), a.severity));
      const gh = GT.el("td"); const link = GT.el("a", "", a.greenhouse_id); link.href = "/greenhouses/" + a.greenhouse_id; gh.append(link);
      const kind = GT.el("td", "mono", a.kind);
      const last = GT.el("td"); GT.time(last, a.last_at);
      const first = GT.el("td"); GT.time(first, a.first_at);
      const count = GT.el("td", "", String(a.count));
      const ack = GT.el("td");
      if (a.acknowledged) {
        ack.textContent = `${a.acknowledged_by} · ${GT.timeText(a.acknowledged_at)}`;
      } else if (operator) {
        const b = GT.el("button", "btn btn-small", "Acknowledge"); b.type = "button";
        b.addEventListener("click", async () => {
          b.disabled = true;
          try { await GT.api("POST", `/api/alarms/${a.id}/ack`); await load(); } catch (e) { alert(e.message); b.disabled = false; }
        });
        ack.append(b);
      } else { ack.textContent = "open"; }
      tr.append(sev, gh, kind, last, first, count, ack);
      body.append(tr);
    }
  }
  load().catch((e) => { body.textContent = e.message; });
  setInterval(() => load().catch(() => {}), 5000);
});
