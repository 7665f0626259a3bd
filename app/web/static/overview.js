"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const body = document.querySelector("#overview tbody");
  function modeBadge(row) {
    return GT.el("span", "badge mode-" + (row.estop_latched ? "estop" : row.mode),
      row.estop_latched ? GT.t("badge.estop") : GT.label("badge.mode.", row.mode));
  }
  function render(rows) {
    body.replaceChildren();
    for (const row of rows) {
      const tr = GT.el("tr", row.estop_latched ? "row-estop" : "");
      tr.dataset.gh = row.id;
      const name = GT.el("td"); const a = GT.el("a", "gh-link", row.name); a.href = "/greenhouses/" + row.id; name.append(a);
      if (row.name !== row.id) { name.append(GT.el("small", "muted", " " + row.id)); }
      const mode = GT.el("td"); mode.append(modeBadge(row));
      const alarms = GT.el("td"); alarms.append(GT.el("span", "badge " + (row.alarms_unacknowledged ? "bad" : "ok"),
        row.alarms_unacknowledged ? GT.t("badge.alarms_open", { n: row.alarms_unacknowledged }) : GT.t("badge.alarms_none")));
      const edge = GT.el("td"); edge.append(GT.el("span", "badge edge-" + row.edge, GT.label("badge.edge.", row.edge)));
      const tel = GT.el("td", "tel-age"); tel.textContent = GT.age(row.telemetry_age_s);
      if (row.last_telemetry_at) { tel.title = row.last_telemetry_at; }
      if (row.telemetry_age_s === null || row.telemetry_age_s > 120) { tel.classList.add("stale"); }
      const water = GT.el("td");
      const pct = row.water_cap_l > 0 ? Math.min(100, 100 * row.water_today_l / row.water_cap_l) : 0;
      water.append(GT.el("span", "", `${row.water_today_l.toFixed(1)} / ${row.water_cap_l.toFixed(0)} L`));
      const bar = GT.el("div", "bar" + (pct > 90 ? " bar-warn" : "")); const fill = GT.el("span"); fill.dataset.pct = pct.toFixed(0);
      bar.append(fill); water.append(bar); fill.style.width = pct + "%";
      const band = GT.el("td", "", row.time_in_band_pct === null ? "–" : row.time_in_band_pct.toFixed(1) + " %");
      const e = row.economics;
      const yld = GT.el("td", "yield", e && e.yield_kg !== null ? GT.t("page.est", { value: `${e.yield_kg.toFixed(1)} kg` }) : "–");
      const profit = GT.el("td", "profit", e && e.profit_eur !== null ? GT.t("page.est", { value: GT.eur(e.profit_eur) }) : "–");
      if (e) { profit.title = GT.t("page.overview.costs", { energy: GT.eur(e.energy_cost_eur), water: GT.eur(e.water_cost_eur) }); }
      const pol = GT.el("td", "mono", row.policy_version);
      tr.append(name, mode, alarms, edge, tel, water, band, yld, profit, pol);
      body.append(tr);
    }
  }
  GT.api("GET", "/api/overview").then(render).catch((e) => { body.textContent = e.message; });
  GT.stream("/api/stream", { overview: render });
});
