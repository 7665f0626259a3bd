// The twin's view ahead: the forecast the worker last computed, a what-if beside it, and how far
// earlier forecasts were from what happened. Reads /api/greenhouses/{gh}/forecast; the what-if form
// posts a lamp choice or a zone's band to /forecast/what-if (checked like a settings change, nothing applied).
(function () {
  "use strict";
  const root = document.getElementById("gh");
  if (!root) { return; }
  const gh = root.dataset.gh;
  const $ = (id) => document.getElementById(id);
  const palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4d7c0f", "#be185d"];
  let plot = null;
  let shown = null;
  let whatIf = null;

  function pct(v) { return v === null || v === undefined ? "–" : (100 * v).toFixed(1); }

  function draw(f) {
    const host = $("chart-forecast");
    const x = f.times.map((t) => new Date(t).getTime() / 1000);
    const series = [{}];
    const data = [x];
    const [base, other] = f.variants;
    base.moisture_vwc.forEach((m, i) => {
      series.push({ label: `Zone ${i + 1}`, stroke: palette[i % palette.length], width: 2 });
      data.push(m.map((v) => 100 * v));
    });
    other.moisture_vwc.forEach((m, i) => {
      series.push({ label: `Zone ${i + 1} (${other.name.replace("_", " ")})`, stroke: palette[i % palette.length], dash: [6, 4], width: 1 });
      data.push(m.map((v) => 100 * v));
    });
    base.bands.forEach((b, i) => {
      series.push({ label: `band Zone ${i + 1}`, stroke: "#9ca3af", dash: [2, 4], width: 1, show: i === 0 });
      data.push(x.map(() => 100 * b[0]));
    });
    const width = Math.max(300, host.clientWidth || 600);
    if (plot) { plot.destroy(); }
    plot = new uPlot({ title: "Predicted moisture per zone (% VWC): forecast solid, what-if dashed", width, height: 240,
      series, axes: [{}, { label: "% VWC" }], scales: { x: { time: true } },
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), GT.tz) }, data, host);
  }

  function totals(f) {
    const [a, b] = f.variants;
    $("fc-name-0").textContent = "forecast";
    $("fc-name-1").textContent = b.name === "what_if" ? "what-if" : b.lamps === "rule" ? "lamps as the rule runs them" : "lamps as the policy runs them";
    const rows = [
      ["Water", (v) => GT.num(v.totals.water_l, 0, "L")],
      ["Lamp hours", (v) => GT.num(v.totals.lamp_hours, 1, "h")],
      ["Energy", (v) => GT.num(v.totals.energy_kwh, 0, "kWh")],
      ["Energy cost", (v) => GT.eur(v.totals.energy_cost_eur)],
      ["Water cost", (v) => GT.eur(v.totals.water_cost_eur)],
      ["Fruit", (v) => GT.num(v.totals.fruit_kg, 1, "kg")],
      ["Profit (fruit less energy and water)", (v) => GT.eur(v.totals.profit_eur)],
      ["Hours below band (zones summed)", (v) => GT.num(v.totals.hours_dry.reduce((s, h) => s + h, 0), 1, "h")],
      ["Hours above band (zones summed)", (v) => GT.num(v.totals.hours_wet.reduce((s, h) => s + h, 0), 1, "h")],
      ["Bands", (v) => v.bands.map((bd) => `${pct(bd[0])}–${pct(bd[1])}`).join(", ") + " %"],
    ];
    const body = document.querySelector("#forecast-totals tbody");
    body.replaceChildren(...rows.map(([label, f2]) => {
      const tr = GT.el("tr");
      tr.append(GT.el("th", "", label), GT.el("td", "fc-base", f2(a)), GT.el("td", "fc-other", f2(b)));
      return tr;
    }));
  }

  function render(f, note) {
    shown = f;
    draw(f);
    totals(f);
    const t = GT.timeText(f.issued);
    $("forecast-note").textContent = `${note} from ${t} (greenhouse clock), policy ${f.policy_version}, computed in ${f.compute_s.toFixed(1)} s`;
    $("forecast-note").title = f.issued;
  }

  function renderError(t) {
    const p = $("forecast-error");
    if (!t || !t.samples) { return; }
    const leads = t.by_lead.filter((b) => b.samples).map((b) => `${b.from_h}–${b.to_h} h ahead ${b.mae_pct_vwc.toFixed(2)}`).join(", ");
    let text = `Forecast error (moisture, predicted vs estimated, mean absolute): ${t.mae_pct_vwc.toFixed(2)} % VWC over ${t.samples} checks (${leads}); bias ${t.bias_pct_vwc >= 0 ? "+" : ""}${t.bias_pct_vwc.toFixed(2)} % VWC.`;
    if (t.water && t.water.predicted_l !== null) {
      text += ` Water since ${GT.timeText(t.water.issued)}: planned ${t.water.predicted_l.toFixed(0)} L, metered ${t.water.metered_l.toFixed(0)} L.`;
    }
    p.textContent = text;
  }

  async function load() {
    const s = await GT.api("GET", `/api/greenhouses/${gh}/forecast`).catch(() => null);
    if (!s) { return; }
    renderError(s.tracking);
    if (!s.forecast) { $("forecast-note").textContent = s.why || "no forecast yet"; return; }
    if (whatIf === null) { render(s.forecast, "Forecast"); }
    else if (s.state !== "ok") { $("forecast-note").textContent = s.why; }
  }

  function zones() {
    const sel = $("whatif-zone");
    if (!shown || sel.options.length > 1) { return; }
    shown.variants[0].bands.forEach((b, i) => {
      const o = GT.el("option", "", `Zone ${i + 1}`); o.value = String(i); sel.append(o);
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
    $("whatif-msg").textContent = "The twin is running the what-if…";
    $("whatif-msg").classList.remove("error");
    try {
      const f = await GT.api("POST", `/api/greenhouses/${gh}/forecast/what-if`, body);
      whatIf = f;
      render(f, "What-if");
      $("whatif-msg").textContent = "What-if shown beside the forecast (dashed); nothing was changed.";
    } catch (e) {
      $("whatif-msg").textContent = e.message;
      $("whatif-msg").classList.add("error");
    }
  });

  load().then(zones);
  setInterval(load, 10000);
})();
