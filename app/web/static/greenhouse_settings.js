// Agronomists and admins: the greenhouse's settings (GET/PATCH /api/greenhouses/{gh}/settings).
// Bands read in % VWC, as on the tiles; only what was changed is sent, with the reason.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const gh = document.getElementById("gh").dataset.gh;
  const $ = (id) => document.getElementById(id);
  const say = (text, bad) => { $("settings-msg").textContent = text; $("settings-msg").className = "msg" + (bad ? " bad-text" : ""); };
  const t = GT.t;
  const pct = (v) => Math.round(v * 1000) / 10;  // m3/m3 -> % VWC, one decimal
  let current = null;

  function input(type, value, attrs) {
    const i = GT.el("input"); i.type = type; i.value = String(value);
    for (const [k, v] of Object.entries(attrs || {})) { i.setAttribute(k, String(v)); }
    return i;
  }
  function cell(child) { const td = GT.el("td"); td.append(child); return td; }

  function render(s) {
    current = s;
    $("settings-version").textContent = t("page.settings.version", { version: s.version });
    $("set-name").value = s.name;
    $("set-lamps").checked = s.lamps_ours;
    $("set-lamp-hours").max = String(s.lamp_hours_max);
    $("set-lamp-hours").value = String(s.lamp_hours_per_day === null ? s.lamp_hours_max : s.lamp_hours_per_day);
    const body = document.querySelector("#settings-zones tbody");
    body.replaceChildren();
    for (const z of s.zones) {
      const tr = GT.el("tr"); tr.dataset.zone = String(z.index);
      const soil = GT.el("select");
      for (const name of ["sand", "loam", "clay"]) {
        const o = GT.el("option", "", GT.label("soil.", name)); o.value = name; o.selected = name === z.soil; soil.append(o);
      }
      soil.dataset.field = "soil";
      const name = input("text", z.name || "", { maxlength: 200, placeholder: t("zone", { n: z.index + 1 }) }); name.dataset.field = "name";
      const low = input("number", pct(z.target_low_vwc), { min: 0.1, max: pct(z.band_high_max_vwc), step: 0.1 }); low.dataset.field = "low";
      const high = input("number", pct(z.target_high_vwc), { min: 0.1, max: pct(z.band_high_max_vwc), step: 0.1 }); high.dataset.field = "high";
      const cap = input("number", z.daily_water_cap_l, { min: 1, max: z.water_cap_max_l, step: "any" }); cap.dataset.field = "cap";
      // An unnamed zone reads as the catalogue counts zones; a name is the agronomist's own words.
      const label = z.label === `Zone ${z.index + 1}` ? t("zone", { n: z.index + 1 }) : z.label;
      tr.append(GT.el("th", "", label), cell(name), cell(soil), cell(low), cell(high), cell(cap));
      body.append(tr);
    }
  }

  // Only what differs from the settings shown: an unchanged field is not sent (nor checked again).
  function patch() {
    const body = { reason: $("set-reason").value.trim(), zones: [] };
    if ($("set-name").value.trim() !== current.name) { body.name = $("set-name").value.trim(); }
    if ($("set-lamps").checked !== current.lamps_ours) { body.lamps_ours = $("set-lamps").checked; }
    const hours = Number($("set-lamp-hours").value);
    const shownHours = current.lamp_hours_per_day === null ? current.lamp_hours_max : current.lamp_hours_per_day;
    if (hours !== shownHours) { body.lamp_hours_per_day = hours; }
    for (const tr of document.querySelectorAll("#settings-zones tbody tr")) {
      const z = current.zones[Number(tr.dataset.zone)];
      const get = (f) => tr.querySelector(`[data-field="${f}"]`).value;
      const zone = { index: z.index };
      if (get("name").trim() !== (z.name || "")) { zone.name = get("name").trim(); }
      if (get("soil") !== z.soil) { zone.soil = get("soil"); }
      if (Number(get("low")) !== pct(z.target_low_vwc)) { zone.target_low_vwc = Number(get("low")) / 100; }
      if (Number(get("high")) !== pct(z.target_high_vwc)) { zone.target_high_vwc = Number(get("high")) / 100; }
      if (Number(get("cap")) !== z.daily_water_cap_l) { zone.daily_water_cap_l = Number(get("cap")); }
      if (Object.keys(zone).length > 1) { body.zones.push(zone); }
    }
    return body;
  }

  $("settings-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = patch();
    if (body.reason.length < 3) { say(t("page.need_reason"), true); $("set-reason").focus(); return; }
    try {
      const s = await GT.api("PATCH", `/api/greenhouses/${gh}/settings`, body);
      const n = Object.keys(s.changed).length;
      say(n === 0 ? t("page.settings.nothing") : t(n > 1 ? "page.settings.saved_many" : "page.settings.saved_one", { version: s.version, n }));
      $("set-reason").value = "";
      render(s);
    } catch (e) { say(e.message, true); }
  });
  GT.api("GET", `/api/greenhouses/${gh}/settings`).then(render).catch((e) => say(e.message, true));
});
