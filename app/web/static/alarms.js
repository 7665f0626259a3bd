"use strict";
// The alarms page: open alarms (acknowledge with a comment, shelve with a reason and a time), the shelved
// ones (unshelve with a reason) and the filtered history. Every action goes through the alarm API.
document.addEventListener("DOMContentLoaded", () => {
  const open = document.querySelector("#alarms tbody");
  const shelvedBody = document.querySelector("#shelved tbody");
  const operator = document.getElementById("alarms").dataset.operator === "yes";
  const t = GT.t;
  const badge = (sev) => GT.el("span", "badge " + (sev === "critical" ? "bad" : sev === "warning" ? "warn" : ""), t("severity." + sev));
  const cell = (child) => { const td = GT.el("td"); if (child) td.append(child); return td; };
  const empty = (body, cols, text) => { const tr = GT.el("tr"); const td = GT.el("td", "muted", text); td.colSpan = cols; tr.append(td); body.append(tr); };

  // Greenhouses by the names their settings give them, as the overview shows them; the id stays in the link.
  const names = new Map();
  const named = GT.api("GET", "/api/greenhouses").then((ghs) => { for (const g of ghs) { names.set(g.id, g.name || g.id); } })
    .catch(() => {});
  function ghCell(id) {
    const a = GT.el("a", "", names.get(id) || id); a.href = "/greenhouses/" + encodeURIComponent(id); a.title = id;
    return cell(a);
  }
  function alarmCell(a) {
    const td = GT.el("td");
    const title = GT.el("strong", "", a.title); title.title = a.kind;
    td.append(title, GT.el("div", "muted", a.description), GT.el("div", "", t("alarms.what_to_do", { action: a.action })));
    return td;
  }
  async function act(button, method, path, body) {
    button.disabled = true;
    // The history below shows the same episodes: redrawn too, so it never contradicts the list above.
    try { await GT.api(method, path, body); await load(); await history(); } catch (e) { alert(e.message); button.disabled = false; }
  }
  function ackCell(a) {
    const td = GT.el("td");
    if (a.acknowledged) {
      td.textContent = `${a.acknowledged_by} · ${GT.timeText(a.acknowledged_at)}` + (a.ack_comment ? ` · “${a.ack_comment}”` : "");
    } else if (operator) {
      const comment = GT.el("input"); comment.placeholder = t("page.alarms.comment"); comment.maxLength = 500;
      const b = GT.el("button", "btn btn-small ack", t("alarms.acknowledge")); b.type = "button";
      b.addEventListener("click", () => act(b, "POST", `/api/alarms/${a.id}/ack`, { comment: comment.value }));
      td.append(comment, b);
    } else { td.textContent = t("alarms.open"); }
    if (operator) {
      const box = GT.el("details", "shelve"); box.append(GT.el("summary", "", t("page.alarms.shelve_open")));
      const reason = GT.el("input"); reason.placeholder = t("page.alarms.reason"); reason.maxLength = 500;
      const minutes = GT.el("select");
      for (const [m, label] of [[60, t("page.alarms.1h")], [240, t("page.alarms.4h")], [720, t("page.alarms.12h")],
        [1440, t("page.alarms.1d")], [10080, t("page.days7")]]) {
        const o = GT.el("option", "", label); o.value = String(m); minutes.append(o);
      }
      const b = GT.el("button", "btn btn-small", t("page.alarms.shelve")); b.type = "button";
      b.addEventListener("click", () => act(b, "POST", `/api/alarms/${a.id}/shelve`, { reason: reason.value, minutes: Number(minutes.value) }));
      box.append(reason, minutes, b);
      td.append(box);
    }
    return td;
  }
  async function load() {
    await named;
    const [rows, shelved] = await Promise.all([GT.api("GET", "/api/alarms"), GT.api("GET", "/api/alarms?shelved=true")]);
    open.replaceChildren();
    if (!rows.length) empty(open, 8, t("alarms.none"));
    for (const a of rows) {
      const tr = GT.el("tr", a.acknowledged ? "acked" : "unacked sev-" + a.severity);
      tr.dataset.alarm = a.id;
      const last = GT.el("td"); GT.time(last, a.last_at);
      const first = GT.el("td"); GT.time(first, a.first_at);
      tr.append(cell(badge(a.severity)), ghCell(a.greenhouse_id), alarmCell(a), GT.el("td", "", a.active ? t("alarms.active") : t("alarms.cleared")),
        last, first, GT.el("td", "", String(a.count)), ackCell(a));
      open.append(tr);
    }
    shelvedBody.replaceChildren();
    if (!shelved.length) empty(shelvedBody, 8, t("alarms.none_shelved"));
    for (const a of shelved) {
      const tr = GT.el("tr"); tr.dataset.alarm = a.id;
      const until = GT.el("td"); GT.time(until, a.shelved_until);
      const td = GT.el("td");
      if (operator) {
        const reason = GT.el("input"); reason.placeholder = t("page.alarms.reason"); reason.maxLength = 500;
        const b = GT.el("button", "btn btn-small", t("page.alarms.unshelve")); b.type = "button";
        b.addEventListener("click", () => act(b, "POST", `/api/alarms/${a.id}/unshelve`, { reason: reason.value }));
        td.append(reason, b);
      }
      tr.append(cell(badge(a.severity)), ghCell(a.greenhouse_id), alarmCell(a), GT.el("td", "", a.active ? t("alarms.active") : t("alarms.cleared")),
        until, GT.el("td", "", a.shelved_by || ""), GT.el("td", "", a.shelve_reason || ""), td);
      shelvedBody.append(tr);
    }
  }

  const form = document.getElementById("history-filters");
  const historyBody = document.querySelector("#history tbody");
  const msg = document.getElementById("history-msg");
  async function history() {
    await named;
    const q = new URLSearchParams({ limit: "200" });
    const val = (id) => document.getElementById(id).value.trim();
    for (const [key, id] of [["gh", "h-gh"], ["kind", "h-kind"], ["severity", "h-severity"], ["state", "h-state"]]) {
      if (val(id)) q.set(key, val(id));
    }
    for (const [key, id] of [["since", "h-since"], ["until", "h-until"]]) {
      if (val(id)) q.set(key, new Date(val(id)).toISOString());  // the browser's local time, sent with its offset
    }
    msg.textContent = "";
    try {
      const rows = await GT.api("GET", "/api/alarms/history?" + q.toString());
      historyBody.replaceChildren();
      if (!rows.length) empty(historyBody, 7, t("alarms.no_match"));
      for (const e of rows) {
        const raised = GT.el("td"); GT.time(raised, e.raised_at);
        const cleared = GT.el("td"); if (e.cleared_at) GT.time(cleared, e.cleared_at); else cleared.textContent = t("alarms.active");
        const title = GT.el("td", "", e.title); title.title = e.kind;
        const ack = e.acknowledged_by ? `${e.acknowledged_by} · ${GT.timeText(e.acknowledged_at)}` + (e.ack_comment ? ` · “${e.ack_comment}”` : "") : "–";
        const tr = GT.el("tr");
        tr.append(cell(badge(e.severity)), ghCell(e.greenhouse_id), title, raised, cleared, GT.el("td", "", String(e.count)), GT.el("td", "", ack));
        historyBody.append(tr);
      }
    } catch (err) { msg.textContent = err.message; }
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); history(); });

  load().catch((e) => { open.textContent = e.message; });
  history();
  const busy = () => (document.activeElement && document.activeElement.tagName === "INPUT") || document.querySelector("details.shelve[open]");
  setInterval(() => { if (!busy()) load().catch(() => {}); }, 5000);
});
