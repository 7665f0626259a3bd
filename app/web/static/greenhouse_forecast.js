// The twin's view ahead: the forecast the worker last computed, a what-if beside it, and how far
// earlier forecasts were from what happened. Reads /api/greenhouses/{gh}/forecast; the what-if form
// posts a lamp choice or a zone's band to /forecast/what-if (checked like a settings change, nothing applied).
(function () {
  "use strict";
  const root = document.getElementById("gh");
  if (!root) { return; }
  const gh = root.dataset.gh;
  const $ = (id) => document.getElementById(id);
  const t = GT.t;
  const palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4d7c0f", "#be185d"];
  let plot = null;
  let shown = null;
  let whatIf = null;

  function pct(v) { return v === null || v === undefined ? "–" : (100 * v).toFixed(1); }

  function draw(f) {
    const host = $("chart-forecast");
    const x = f.times.map((ts) => new Date(ts).getTime() / 1000);
    const series = [{ label: t("col.time") }];  // uPlot's own legend says "Time" otherwise
    const data = [x];
    const [base, other] = f.variants;
    base.moisture_vwc.forEach((m, i) => {
      series.push({ label: t("zone", { n: i + 1 }), stroke: palette[i % palette.length], width: 2 });
      data.push(m.map((v) => 100 * v));
    });
    other.moisture_vwc.forEach((m, i) => {
      series.push({ label: t("page.forecast.series_other", { zone: t("zone", { n: i + 1 }), variant: variantName(other) }), stroke: palette[i % palette.length], dash: [6, 4], width: 1 });
      data.push(m.map((v) => 100 * v));
    });
    base.bands.forEach((b, i) => {
      series.push({ label: t("page.forecast.series_band", { zone: t("zone", { n: i + 1 }) }), stroke: "#9ca3af", dash: [2, 4], width: 1, show: i === 0 });
      data.push(x.map(() => 100 * b[0]));
    });
    const width = Math.max(300, host.clientWidth || 600);
    if (plot) { plot.destroy(); }
    plot = new uPlot({ title: t("page.forecast.chart"), width, height: 240,
      series, axes: [{}, { label: "% VWC" }], scales: { x: { time: true } },
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), GT.tz) }, data, host);
  }

  // A variant as people name it: the forecast, the form's what-if, or the lamps run another way.
  function variantName(v) {
    if (v.name === "forecast") { return t("page.forecast.name.forecast"); }
    if (v.name === "what_if") { return t("page.forecast.name.what_if"); }
    return t(v.lamps === "rule" ? "page.forecast.name.lamps_rule" : "page.forecast.name.lamps_policy");
  }

  function totals(f) {
    const [a, b] = f.variants;
    $("fc-name-0").textContent = t("page.forecast.name.forecast");
    $("fc-name-1").textContent = variantName(b);
    const rows = [
      [t("page.forecast.row.water"), (v) => GT.num(v.totals.water_l, 0, "L")],
      [t("page.forecast.row.lamp_hours"), (v) => GT.num(v.totals.lamp_hours, 1, "h")],
      [t("page.forecast.row.energy"), (v) => GT.num(v.totals.energy_kwh, 0, "kWh")],
      [t("page.forecast.row.energy_cost"), (v) => GT.eur(v.totals.energy_cost_eur)],
      [t("page.forecast.row.water_cost"), (v) => GT.eur(v.totals.water_cost_eur)],
      [t("page.forecast.row.fruit"), (v) => GT.num(v.totals.fruit_kg, 1, "kg")],
      [t("page.forecast.row.profit"), (v) => GT.eur(v.totals.profit_eur)],
      [t("page.forecast.row.hours_dry"), (v) => GT.num(v.totals.hours_dry.reduce((s, h) => s + h, 0), 1, "h")],
      [t("page.forecast.row.hours_wet"), (v) => GT.num(v.totals.hours_wet.reduce((s, h) => s + h, 0), 1, "h")],
      [t("page.forecast.row.bands"), (v) => v.bands.map((bd) => `${pct(bd[0])}–${pct(bd[1])}`).join(", ") + " %"],
    ];
    const body = document.querySelector("#forecast-totals tbody");
    body.replaceChildren(...rows.map(([label, f2]) => {
      const tr = GT.el("tr");
      tr.append(GT.el("th", "", label), GT.el("td", "fc-base", f2(a)), GT.el("td", "fc-other", f2(b)));
      return tr;
    }));
  }

  function render(f, kind) {
    shown = f;
    draw(f);
    totals(f);
    $("forecast-note").textContent = t("page.forecast.note", { kind: t("page.forecast.kind." + kind), time: GT.timeText(f.issued),
      policy: f.policy_version, seconds: f.compute_s.toFixed(1) });
    $("forecast-note").title = f.issued;
  }

  function renderError(track) {
    const p = $("forecast-error");
    if (!track || !track.samples) { return; }
    const leads = track.by_lead.filter((b) => b.samples)
      .map((b) => t("page.forecast.lead", { from_h: b.from_h, to_h: b.to_h, mae: b.mae_pct_vwc.toFixed(2) })).join(", ");
    let text = t("page.forecast.error", { mae: track.mae_pct_vwc.toFixed(2), n: track.samples, leads,
      bias: (track.bias_pct_vwc >= 0 ? "+" : "") + track.bias_pct_vwc.toFixed(2) });
    if (track.water && track.water.predicted_l !== null) {
      text += " " + t("page.forecast.water", { time: GT.timeText(track.water.issued),
        planned: track.water.predicted_l.toFixed(0), metered: track.water.metered_l.toFixed(0) });
    }
    p.textContent = text;
  }

  async function load() {
    const s = await GT.api("GET", `/api/greenhouses/${gh}/forecast`).catch(() => null);
    if (!s) { return; }
    renderError(s.tracking);
    if (!s.forecast) { $("forecast-note").textContent = s.why || t("page.forecast.none_yet"); return; }
    if (whatIf === null) { render(s.forecast, "forecast"); }
    else if (s.state !== "ok") { $("forecast-note").textContent = s.why; }
  }

  function zones() {
    const sel = $("whatif-zone");
    if (!shown || sel.options.length > 1) { return; }
    shown.variants[0].bands.forEach((b, i) => {
      const o = GT.el("option", "", t("zone", { n: i + 1 })); o.value = String(i); sel.append(o);
    });
  }

  $("whatif-zone").addEventListener("focus", zones);
  $("whatif-zone").addEventListener("change", () => {
    const i = $("whatif-zone").value;
    if (i === "" || !shown) { return; }
    const b = shown.variants[0].bands[Number(i)];
    $("whatif-low").value = pct(b[0]); $("whatif-high").value = pct(b[1]);
  });
  $("whatif-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = {};
    if ($("whatif-lamps").value) { body.lamps = $("whatif-lamps").value; }
    const zone = $("whatif-zone").value;
    if (zone !== "") {
      body.zones = [{ index: Number(zone), target_low_vwc: Number($("whatif-low").value) / 100,
        target_high_vwc: Number($("whatif-high").value) / 100 }];
    }
    $("whatif-msg").textContent = t("page.forecast.running");
    $("whatif-msg").classList.remove("error");
    try {
      const f = await GT.api("POST", `/api/greenhouses/${gh}/forecast/what-if`, body);
      whatIf = f;
      render(f, "what_if");
      $("whatif-msg").textContent = t("page.forecast.shown");
    } catch (e) {
      $("whatif-msg").textContent = e.message;
      $("whatif-msg").classList.add("error");
    }
  });

  load().then(zones);
  setInterval(load, 10000);
})();
