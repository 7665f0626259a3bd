// The greenhouse page: live tiles from the stream, trends from the history API, operator controls.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("gh");
  const gh = root.dataset.gh;
  const operator = root.dataset.operator === "yes";
  const $ = (id) => document.getElementById(id);
  let state = null, lastDecisionSeq = null, clips = [], hours = 24;

  function kv(table, rows) {
    table.replaceChildren();
    for (const [label, value, cls] of rows) {
      const tr = GT.el("tr"); tr.append(GT.el("th", "", label));
      const td = GT.el("td", cls || "", value); tr.append(td); table.append(tr);
    }
  }
  const t = GT.t;
  function onOff(v) { return v === null || v === undefined ? "–" : v ? t("value.open") : t("value.closed"); }
  function clipFor(actuator) { return clips.filter((c) => c.actuator === actuator); }
  // A clip in words, in the user's language; the rule's own reason (or its id) from an older service.
  function clipWords(c) { return c.text || (c.why ? `${c.why} (${c.rule})` : c.rule); }

  // A zone without a name reads as the catalogue counts zones, in the user's language.
  function zoneLabel(z) { return z.label === `Zone ${z.index + 1}` ? t("zone", { n: z.index + 1 }) : z.label; }

  function zoneTile(z) {
    const tile = GT.el("article", "tile");
    tile.dataset.zone = String(z.index);
    const inBand = z.in_band === null ? "unknown" : z.in_band ? "in" : (z.moisture_vwc < z.band_low_vwc ? "dry" : "wet");
    tile.classList.add("band-" + inBand);
    if (z.valve_failed) { tile.classList.add("failed"); }
    const title = zoneLabel(z);
    const head = GT.el("header"); head.append(GT.el("h3", "", title), GT.el("span", "muted", GT.label("soil.", z.soil)));
    const big = GT.el("div", "big");
    big.append(GT.el("span", "value moisture", z.moisture_vwc === null ? "–" : (100 * z.moisture_vwc).toFixed(1)), GT.el("span", "unit", "% VWC"));
    const band = GT.el("div", "band");
    band.append(GT.el("span", "", t("tile.band", { band: z.band_label })), GT.el("span", "band-state " + inBand, t("tile." + inBand)));
    const gauge = GT.el("div", "gauge"); const zoneBand = GT.el("span", "gauge-band"); const mark = GT.el("span", "gauge-mark");
    const scale = (v) => Math.max(0, Math.min(100, (v - 0.05) / 0.45 * 100));
    zoneBand.style.left = scale(z.band_low_vwc) + "%"; zoneBand.style.width = (scale(z.band_high_vwc) - scale(z.band_low_vwc)) + "%";
    if (z.moisture_vwc !== null) { mark.style.left = scale(z.moisture_vwc) + "%"; } else { mark.hidden = true; }
    gauge.append(zoneBand, mark);
    const probes = GT.el("ul", "probes");
    z.probes_vwc.forEach((p, i) => {
      const st = z.probe_status[i] || "–";
      const li = GT.el("li", "probe-" + st, t("tile.probe", { n: i + 1, value: p === null ? t("tile.no_reading") : (100 * p).toFixed(1) + " %",
        status: GT.label("badge.probe.", st) }));
      probes.append(li);
    });
    const valve = GT.el("div", "valve");
    const mismatch = z.valve_commanded !== null && z.valve_confirmed !== null && z.valve_commanded !== z.valve_confirmed;
    valve.append(GT.el("span", "", t("tile.valve")), GT.el("b", "valve-commanded", onOff(z.valve_commanded)),
      GT.el("span", "muted", t("tile.commanded")), GT.el("b", "valve-confirmed" + (mismatch ? " warn-text" : ""), onOff(z.valve_confirmed)),
      GT.el("span", "muted", t("tile.confirmed")));
    tile.append(head, big, gauge, band, valve);
    // The last decision's clips of this valve, beside the valve they changed.
    const zclips = clipFor(`valve[${z.index}]`);
    if (zclips.length) { tile.append(GT.el("div", "clip", t("tile.clipped", { clips: zclips.map(clipWords).join("; ") }))); }
    if (z.valve_failed) { tile.append(GT.el("div", "failed-latch", t("tile.failed"))); }
    tile.append(GT.el("div", "water muted", t("tile.water", { used: z.water_today_l.toFixed(1), cap: z.water_cap_l.toFixed(0) })), probes);
    return tile;
  }

  function render(s) {
    state = s;
    $("gh-name").textContent = s.name;
    const mode = s.estop_latched ? "estop" : s.mode;
    $("mode-badge").className = "badge mode-" + mode; $("mode-badge").textContent = s.estop_latched ? t("badge.estop") : GT.label("badge.mode.", s.mode);
    $("edge-badge").className = "badge edge-" + s.edge; $("edge-badge").textContent = t("badge.edge", { state: GT.label("badge.edge.", s.edge) });
    const age = $("tel-age"); age.textContent = GT.age(s.telemetry_age_s); age.title = s.last_telemetry_at || "";
    age.className = s.telemetry_age_s === null || s.telemetry_age_s > 120 ? "stale" : "";
    $("policy").textContent = s.policy_version;
    $("confidence").textContent = s.confidence === null ? "–" : (100 * s.confidence).toFixed(0) + " %";
    $("water").textContent = `${s.water_today_l.toFixed(1)} / ${s.water_cap_l.toFixed(0)} L`;
    $("inband").textContent = s.time_in_band_pct === null ? "–" : s.time_in_band_pct.toFixed(1) + " %";
    $("alarm-count").textContent = s.alarms_unacknowledged ? t("gh.open_alarms", { n: s.alarms_unacknowledged }) : t("gh.no_open_alarms");
    $("alarm-count").className = "meta " + (s.alarms_unacknowledged ? "bad-text" : "");
    $("estop-banner").hidden = !s.estop_latched;
    document.body.classList.toggle("estop-active", s.estop_latched);
    $("zones").replaceChildren(...s.zones.map(zoneTile));
    const a = s.actuators, c = s.climate;
    // Each clip beside the value it changed.
    const clipped = (actuator) => { const w = clipFor(actuator).map(clipWords).join("; "); return w ? ` (${t("kv.clipped", { clips: w })})` : ""; };
    kv($("actuators"), [
      [t("kv.pump_commanded"), GT.num(a.pump_commanded_pct, 0, "%") + clipped("pump")],
      [t("kv.pump_confirmed"), GT.num(a.pump_confirmed_pct, 0, "%")],
      [t("kv.flow"), GT.num(a.flow_l_min, 2, "L/min")], [t("kv.pump_current"), GT.num(a.pump_current_a, 2, "A")],
      [t("kv.lights_commanded"), GT.num(a.light_commanded_pct, 0, "%") + clipped("lights")],
      [t("kv.lights_confirmed"), GT.num(a.light_confirmed_pct, 0, "%")],
      [t("kv.lights_today"), GT.num(a.lights_hours_today, 1, "h")]]);
    kv($("climate"), [[t("kv.air_temp"), GT.num(c.air_temp_c, 1, "°C")], [t("kv.humidity"), GT.num(c.air_rh_pct, 0, "%")],
      [t("kv.par"), GT.num(c.par_umol_m2_s, 0, "µmol/m²/s")], [t("kv.co2"), GT.num(c.co2_ppm, 0, "ppm")],
      [t("kv.leaf_temp"), GT.num(c.leaf_temp_c, 1, "°C")]]);
    renderEconomics(s.economics);
    renderOutlook(s.decision_outlook);
    const cr = s.crop, o = s.outlook;
    kv($("crop"), [[t("kv.crop_age"), GT.num(cr.crop_day, 1, t("unit.days"))], [t("kv.season"), GT.num(100 * cr.growth_stage, 0, "%")],
      [t("kv.dli"), GT.num(cr.dli_today_mol_m2, 2, "mol/m²")], [t("kv.lamp_hours"), GT.num(cr.lamp_hours_today, 1, "h")],
      [t("kv.lai"), GT.num(cr.lai, 2, "")], [t("kv.fruit"), GT.num(cr.fruit_load_g_m2, 0, "g/m²")],
      [t("kv.yield"), GT.num(cr.yield_kg_m2, 3, "kg/m²")]]);
    const old = (v) => (v === null ? "" : ", " + t("page.gh.min_old", { n: (v / 60).toFixed(0) }));
    const cheapest = o.price_eur_mwh.indexOf(Math.min(...o.price_eur_mwh));
    kv($("outlook"), [[t("kv.weather"), GT.label("page.source.", o.weather_source) + old(o.weather_age_s)],
      [t("kv.prices"), GT.label("page.source.", o.price_source) + old(o.price_age_s)],
      [t("kv.price_now"), GT.num(o.price_eur_mwh[0], 0, "EUR/MWh")],
      [t("kv.cheapest"), `+${cheapest} h: ${GT.num(o.price_eur_mwh[cheapest], 0, "EUR/MWh")}`],
      [t("kv.published"), `${o.price_published.reduce((x, y) => x + y, 0)} / 24`],
      [t("kv.sun"), GT.num(Math.max(...o.forecast_solar_w_m2), 0, "W/m²")],
      [t("kv.outlook_alarms"), o.alarms.length ? o.alarms.join(", ") : t("kv.none")]]);
    if (operator) { renderControls(s); }
    if (s.last_decision_seq !== lastDecisionSeq) { lastDecisionSeq = s.last_decision_seq; loadDecisions(); }
  }

  // ---- today's economics and the outlook -------------------------------------------------------
  function moneyTile(key, label, value, unit, sub, estimated) {
    const tile = GT.el("div", "money-tile" + (estimated ? " estimated" : ""));
    tile.dataset.key = key;
    const v = GT.el("div", "money-value"); v.append(GT.el("b", "value", value));
    if (unit) { v.append(GT.el("span", "unit", unit)); }
    if (estimated) { v.append(GT.el("span", "est", t("page.gh.est"))); }
    tile.append(GT.el("div", "money-label", label), v);
    if (sub) { tile.append(GT.el("div", "muted money-sub", sub)); }
    return tile;
  }
  function renderEconomics(e) {
    const box = $("economics");
    if (!e) { box.replaceChildren(GT.el("p", "muted", t("page.gh.econ_none"))); $("econ-day").textContent = ""; return; }
    $("econ-day").textContent = e.day;
    const est = (k) => e.estimated.includes(k);
    const tariff = tariffNote(e.price_source);
    box.replaceChildren(
      moneyTile("dli", t("page.gh.dli"), e.dli_mol_m2.toFixed(1), "mol/m²", t("page.gh.dli_sub")),
      moneyTile("lights", t("page.gh.lights"), e.lights_hours.toFixed(1), "h", `${e.lamp_kwh.toFixed(0)} kWh`),
      moneyTile("energy", t("page.gh.energy_cost"), GT.eur(e.energy_cost_eur), "",
        t("page.gh.energy_sub", { kwh: e.lamp_kwh.toFixed(0), price: e.lamp_price_eur_mwh.toFixed(0) }) + tariff),
      moneyTile("water", t("page.gh.water_cost"), GT.eur(e.water_cost_eur), "",
        t("page.gh.water_sub", { litres: e.water_l.toFixed(0), price: e.water_price_eur_m3.toFixed(2) })),
      moneyTile("yield", t("page.gh.yield"), e.yield_kg === null ? "–" : e.yield_kg.toFixed(1), "kg",
        e.revenue_eur === null ? t("page.gh.no_trend") : t("page.gh.worth", { eur: GT.eur(e.revenue_eur), price: e.fruit_price_eur_kg.toFixed(2) }), est("yield_kg")),
      moneyTile("profit", t("page.gh.profit"), GT.eur(e.profit_eur), "", t("page.gh.profit_sub"), est("profit_eur")));
  }
  // Where the tariff stood in for a price no decision recorded: said after the figure it affects.
  function tariffNote(source) {
    if (source === "tariff") { return " " + t("page.gh.tariff"); }
    return source === "mixed" ? " " + t("page.gh.partly_tariff") : "";
  }
  let outlookKey = null;
  function renderOutlook(o) {
    if (!o) { $("outlook-note").textContent = t("page.gh.no_decision"); return; }
    const key = JSON.stringify([o.hours[0], o.price_eur_mwh, o.temp_c, o.solar_w_m2, o.published]);
    if (key === outlookKey) { return; }
    outlookKey = key;
    const published = o.published.filter(Boolean).length;
    $("outlook-note").textContent = published === o.published.length ? t("page.gh.prices_published")
      : t("page.gh.prices_partly", { n: published, total: o.published.length });
    const x = o.hours.map((ts) => new Date(ts).getTime() / 1000);
    chart("chart-outlook", t("page.gh.chart.outlook"), [{},
      { label: t("page.gh.chart.price"), stroke: "#7c3aed", width: 2, paths: uPlot.paths.stepped({ align: 1 }) },
      { label: t("page.gh.chart.outside"), stroke: "#dc2626" }, { label: t("page.gh.chart.sun"), stroke: "#d97706" }],
      [x, o.price_eur_mwh, o.temp_c, o.solar_w_m2.map((v) => v === null ? null : v / 10)], "");
  }

  async function loadDecisions() {
    const rows = await GT.api("GET", `/api/greenhouses/${gh}/recent-decisions?limit=8`).catch(() => null);
    if (!rows) { return; }
    clips = rows.length ? rows[0].clips : [];
    const body = document.querySelector("#decisions tbody");
    body.replaceChildren();
    for (const d of rows) {
      const tr = GT.el("tr"); const when = GT.el("td"); GT.time(when, d.ts);
      // Sentences in the user's language from the API; the stored codes stay on hover.
      const cmd = GT.el("td", "command", d.command_text);
      cmd.title = t("page.gh.command_codes", { valves: d.valves.join(""), pump: d.pump_pct.toFixed(0), light: d.light_pct.toFixed(0) });
      const why = GT.el("td", "why");
      const ol = GT.el("ol"); d.explanation_text.forEach((s) => ol.append(GT.el("li", "", s))); why.append(ol);
      // What the decision was made without (a held reading, a stale outlook), in words; codes on hover.
      if (d.alarms_text.length) { const note = GT.el("p", "meta", d.alarms_text.join("; ")); note.title = d.alarms.join(", "); why.append(note); }
      const cl = GT.el("td", d.clips_text.length ? "clip-cell" : "");
      if (d.clips_text.length) { const ul = GT.el("ul"); d.clips_text.forEach((s) => ul.append(GT.el("li", "", s))); cl.append(ul); } else { cl.textContent = "–"; }
      tr.append(when, GT.el("td", "mono", d.actor), cmd, GT.el("td", "", (100 * d.confidence).toFixed(0) + " %"), why, cl, GT.el("td", "", d.ack_status ? GT.label("badge.ack.", d.ack_status) : "–"));
      body.append(tr);
    }
    if (state) { $("zones").replaceChildren(...state.zones.map(zoneTile)); }
  }

  // ---- trends -------------------------------------------------------------------------------
  const charts = {};
  function chart(id, title, series, data, yLabel) {
    const host = $(id);
    const width = Math.max(300, host.clientWidth || 600);
    if (charts[id]) { charts[id].destroy(); }
    series[0] = { label: t("col.time") };  // uPlot's own legend says "Time" otherwise
    charts[id] = new uPlot({ title, width, height: 220, series, axes: [{}, { label: yLabel }],
      scales: { x: { time: true } }, tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), GT.tz) }, data, host);
  }
  const palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4d7c0f", "#be185d"];
  async function loadHistory() {
    const h = await GT.api("GET", `/api/greenhouses/${gh}/history?hours=${hours}&points=${hours > 24 ? 336 : 288}`);
    const x = h.ts.map((ts) => new Date(ts).getTime() / 1000);
    const pct = (arr) => arr.map((v) => v === null ? null : 100 * v);
    const lo = Math.min(...h.band_low_vwc), hi = Math.max(...h.band_high_vwc);
    const mSeries = [{}], mData = [x];
    h.moisture_vwc.forEach((s, i) => { mSeries.push({ label: zoneLabel({ label: h.zone_labels[i], index: i }), stroke: palette[i % palette.length], width: 1.5 }); mData.push(pct(s)); });
    mSeries.push({ label: t("page.gh.chart.band_low"), stroke: "#64748b", dash: [6, 4] }, { label: t("page.gh.chart.band_high"), stroke: "#64748b", dash: [6, 4] });
    mData.push(x.map(() => 100 * lo), x.map(() => 100 * hi));
    chart("chart-moisture", t("page.gh.chart.moisture"), mSeries, mData, "% VWC");
    chart("chart-water", t("page.gh.chart.water"), [{}, { label: t("page.gh.chart.flow"), stroke: "#2563eb", width: 1.5 },
      { label: t("page.gh.chart.pump"), stroke: "#0891b2" }, { label: t("page.gh.chart.lights"), stroke: "#d97706" }], [x, h.flow_l_min, h.pump_pct, h.light_pct], "");
    chart("chart-climate", t("gh.climate"), [{}, { label: t("page.gh.chart.air"), stroke: "#dc2626", width: 1.5 }, { label: t("page.gh.chart.rh"), stroke: "#2563eb" },
      { label: t("page.gh.chart.par"), stroke: "#16a34a" }], [x, h.air_temp_c, h.air_rh_pct, h.par_umol_m2_s.map((v) => v === null ? null : v / 10)], "");
    // Marked where no decision recorded the price of its hour and the tariff's stands in.
    const priceTitle = t("page.gh.chart.price_title", { tariff: tariffNote(h.price_source) });
    chart("chart-price", priceTitle, [{}, { label: t("page.gh.chart.price"), stroke: "#7c3aed", width: 1.5 },
      { label: t("page.gh.chart.lights"), stroke: "#d97706" }], [x, h.price_eur_mwh, h.light_pct], "");
  }
  document.querySelectorAll("[data-hours]").forEach((b) => b.addEventListener("click", () => {
    hours = Number(b.dataset.hours);
    document.querySelectorAll("[data-hours]").forEach((o) => o.setAttribute("aria-pressed", String(o === b)));
    loadHistory().catch(() => {});
  }));

  // ---- controls (operators only; the API refuses everyone else) ------------------------------
  const msg = (text, bad) => { const m = $("control-msg"); if (m) { m.textContent = text; m.className = "msg" + (bad ? " bad-text" : ""); } };
  let manualBuilt = false;
  function renderControls(s) {
    $("mode-auto").setAttribute("aria-pressed", String(s.mode === "auto"));
    $("mode-manual").setAttribute("aria-pressed", String(s.mode === "manual"));
    for (const id of ["mode-auto", "mode-manual", "estop"]) { $(id).disabled = s.estop_latched; }
    $("manual-form").hidden = s.mode !== "manual" || s.estop_latched;
    if (!manualBuilt) {
      const box = $("manual-valves");
      s.zones.forEach((z) => {
        const label = GT.el("label", "switch"); const input = GT.el("input"); input.type = "checkbox"; input.id = `valve-${z.index}`;
        label.append(input, GT.el("span", "", ` ${zoneLabel(z)}`)); box.append(label);
      });
      manualBuilt = true;
    }
  }
  function reason() {
    const r = $("reason").value.trim();
    if (r.length < 3) { msg(t("page.need_reason"), true); $("reason").focus(); return null; }
    return r;
  }
  function manualAction(fromForm) {
    const z = state.zones.length;
    if (!fromForm) {  // entering manual: hold what is commanded now
      return state.zones.map((x) => x.valve_commanded ? 1 : 0).concat([state.actuators.pump_commanded_pct || 0, state.actuators.light_commanded_pct || 0]);
    }
    const valves = []; for (let i = 0; i < z; i++) { valves.push($(`valve-${i}`).checked ? 1 : 0); }
    return valves.concat([Number($("manual-pump").value) || 0, Number($("manual-light").value) || 0]);
  }
  async function setMode(mode, action) {
    const r = reason(); if (!r) { return; }
    const body = { mode, reason: r };
    if (mode === "manual") { body.manual_action = action; }
    try { await GT.api("POST", `/api/greenhouses/${gh}/mode`, body); msg(t("page.gh.mode_set", { mode: GT.label("badge.mode.", mode) })); }
    catch (e) { msg(e.message, true); }
  }
  if (operator) {
    $("mode-auto").addEventListener("click", () => setMode("auto"));
    $("mode-manual").addEventListener("click", () => {
      const action = manualAction(false);
      state.zones.forEach((z) => { $(`valve-${z.index}`).checked = action[z.index] >= 0.5; });
      $("manual-pump").value = String(Math.round(action[state.zones.length]));
      $("manual-light").value = String(Math.round(action[state.zones.length + 1]));
      setMode("manual", action);
    });
    $("manual-form").addEventListener("submit", (ev) => { ev.preventDefault(); setMode("manual", manualAction(true)); });
    const dialog = $("estop-dialog");
    $("estop").addEventListener("click", () => dialog.showModal());
    $("estop-cancel").addEventListener("click", () => dialog.close());
    $("estop-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const r = $("estop-reason").value.trim();
      if (r.length < 3) { return; }
      dialog.close();
      try { await GT.api("POST", `/api/greenhouses/${gh}/estop`, { reason: r }); msg(t("page.gh.estop_done")); } catch (e) { msg(e.message, true); }
    });
    $("reset-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const r = $("reset-reason").value.trim();
      if (r.length < 3) { $("reset-reason").focus(); return; }
      const mode = $("reset-mode").value;
      try {
        await GT.api("POST", `/api/greenhouses/${gh}/estop/reset`, { reason: r, mode });
        $("reset-reason").value = "";
        msg(t(mode === "auto" ? "page.gh.reset_auto_done" : "page.gh.reset_manual_done"));
      }
      catch (e) { msg(e.message, true); }
    });
  }

  const report = $("report-form");
  if (report) {
    const day = (d) => d.toISOString().slice(0, 10);
    const today = new Date();
    $("report-to").value = day(new Date(today.getTime() + 86400e3));
    $("report-from").value = day(new Date(today.getTime() - 6 * 86400e3));
    const period = () => new URLSearchParams({ from: `${$("report-from").value}T00:00:00Z`, to: `${$("report-to").value}T00:00:00Z` });
    // The CSV link follows the dates, so it always holds the same period as the PDF button.
    const csvLink = () => { $("report-csv").href = `/api/greenhouses/${gh}/report.csv?${period()}`; };
    csvLink();
    $("report-from").addEventListener("change", csvLink);
    $("report-to").addEventListener("change", csvLink);
    report.addEventListener("submit", (ev) => {
      ev.preventDefault();
      location.href = `/api/greenhouses/${gh}/report.pdf?${period()}`;
    });
    GT.api("GET", `/api/greenhouses/${gh}/audit-status`).then((a) => {
      const el = $("audit-status");
      el.textContent = a.ok ? t("page.gh.audit_ok", { n: a.records_checked, time: GT.timeText(a.checked_at) })
        : t("page.gh.audit_broken", { seq: a.first_bad_seq, reason: a.reason });
      el.className = a.ok ? "ok-text" : "bad-text";
    }).catch((e) => { $("audit-status").textContent = e.message; });
  }

  GT.api("GET", `/api/greenhouses/${gh}/live`).then(render).catch(() => {});
  GT.stream(`/api/stream?gh=${encodeURIComponent(gh)}`, { live: render });
  loadHistory().catch(() => {});
  setInterval(() => loadHistory().catch(() => {}), 60000);
});
