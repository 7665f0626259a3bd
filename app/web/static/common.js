// Shared by every dashboard page: API calls with the CSRF token, site-time formatting, the live stream.
"use strict";
const GT = (() => {
  const meta = (name) => { const m = document.querySelector(`meta[name="${name}"]`); return m ? m.content : ""; };
  const tz = meta("site-tz") || "UTC";
  // The catalogue's labels in the user's language (audit/wording.json), handed over by the page.
  let words = {};
  try { words = JSON.parse(meta("words") || "{}"); } catch (e) { words = {}; }
  function t(key, values) {
    const template = Object.prototype.hasOwnProperty.call(words, key) ? words[key] : key;
    return template.replace(/\{(\w+)\}/g, (m, name) => (values && name in values ? String(values[name]) : m));
  }
  // A code the service sends (a mode, a soil, a probe's status) in words; the code itself when the catalogue
  // has none for it, so a new code still shows rather than a bare key.
  function label(prefix, code) {
    const key = prefix + code;
    return Object.prototype.hasOwnProperty.call(words, key) ? words[key] : String(code);
  }
  const fmt = new Intl.DateTimeFormat("sv-SE", { timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });

  async function api(method, path, body) {
    const headers = { "Accept": "application/json" };
    if (method !== "GET") { headers["X-CSRF-Token"] = meta("csrf-token"); }
    if (body !== undefined) { headers["Content-Type"] = "application/json"; }
    const r = await fetch(path, { method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body) });
    if (r.status === 401) { location.href = "/login?next=" + encodeURIComponent(location.pathname); }
    const data = r.status === 204 ? null : await r.json().catch(() => null);
    if (!r.ok) {
      const detail = data && data.detail ? (typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail)) : r.statusText;
      throw new Error(`${r.status}: ${detail}`);
    }
    return data;
  }

  // Site local time on screen, ISO-8601 with the site's offset on hover (e.g. 2026-06-01T14:00:00+02:00).
  const offsetFmt = new Intl.DateTimeFormat("en-US", { timeZone: tz, timeZoneName: "longOffset" });
  function isoLocal(d) {
    const name = offsetFmt.formatToParts(d).find((p) => p.type === "timeZoneName");
    const offset = name ? name.value.replace("GMT", "") : "";
    return fmt.format(d).replace(",", "").replace(" ", "T") + (offset || "+00:00");
  }
  function time(el, iso) {
    if (!iso) { el.textContent = "–"; el.removeAttribute("title"); return; }
    const d = new Date(iso);
    el.textContent = fmt.format(d).replace(",", "");
    el.title = isoLocal(d);
  }
  function timeText(iso) { return iso ? fmt.format(new Date(iso)).replace(",", "") : "–"; }
  function age(seconds) {
    if (seconds === null || seconds === undefined) { return t("page.age.never"); }
    if (seconds < 90) { return t("page.age.s", { n: Math.round(seconds) }); }
    if (seconds < 5400) { return t("page.age.min", { n: Math.round(seconds / 60) }); }
    return t("page.age.h", { n: (seconds / 3600).toFixed(1) });
  }
  function num(v, digits, unit) {
    if (v === null || v === undefined) { return "–"; }
    return v.toFixed(digits) + (unit ? " " + unit : "");
  }
  // Money in euros: cents below 100, whole euros above; the sign in front (-€3.20).
  function eur(v) {
    if (v === null || v === undefined) { return "–"; }
    const digits = Math.abs(v) < 100 ? 2 : 0;
    const shown = Math.abs(v).toFixed(digits);
    return (v < 0 && Number(shown) !== 0 ? "−" : "") + "€" + shown;  // no "−€0.00" for a rounding crumb
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  // EventSource with a visible "disconnected, last update N s ago" banner and reconnect with back-off.
  function stream(url, handlers) {
    const banner = document.getElementById("conn");
    let source = null, lastUpdate = Date.now(), connected = false, delay = 1000, retryTimer = null;
    function show() {
      if (connected) { banner.hidden = true; return; }
      banner.hidden = false;
      const secs = Math.round((Date.now() - lastUpdate) / 1000);
      banner.textContent = t("page.disconnected", { s: secs });
    }
    function open() {
      source = new EventSource(url);
      source.onopen = () => { connected = true; delay = 1000; show(); };
      for (const [name, fn] of Object.entries(handlers)) {
        source.addEventListener(name, (ev) => { lastUpdate = Date.now(); connected = true; show(); fn(JSON.parse(ev.data)); });
      }
      source.addEventListener("logout", () => { location.href = "/login"; });
      source.onerror = () => {
        connected = false; show(); source.close();
        clearTimeout(retryTimer);
        retryTimer = setTimeout(open, delay);
        delay = Math.min(delay * 2, 15000);
      };
    }
    setInterval(() => {
      // No event for 3 keep-alive periods: the connection is dead even if the socket has not noticed.
      if (connected && Date.now() - lastUpdate > 15000) { connected = false; source.close(); open(); }
      show();
    }, 1000);
    open();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const out = document.getElementById("logout");
    if (out) {
      out.addEventListener("click", async () => {
        try { await api("POST", "/api/auth/logout"); } finally { location.href = "/login"; }
      });
    }
    const language = document.getElementById("language");
    if (language) {
      language.addEventListener("change", async () => {
        try { await api("PATCH", "/api/me", { language: language.value }); location.reload(); }
        catch (e) { alert(e.message); }
      });
    }
    const clock = document.getElementById("clock");
    if (clock) {
      const tick = () => { const now = new Date(); clock.textContent = fmt.format(now).replace(",", "") + " " + tz; clock.title = isoLocal(now); };
      tick(); setInterval(tick, 1000);
    }
  });
  return { api, time, timeText, age, num, eur, el, stream, tz, t, label };
})();
