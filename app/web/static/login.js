"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("login");
  const error = document.getElementById("login-error");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    const body = { username: form.username.value.trim(), password: form.password.value };
    const r = await fetch("/api/auth/login", { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json" }, body: JSON.stringify(body) });
    if (r.ok) { location.href = form.dataset.next || "/"; return; }
    const data = await r.json().catch(() => ({}));
    error.textContent = r.status === 401 ? "Wrong user name or password." : (data.detail || `Login failed (${r.status}).`);
    error.hidden = false;
  });
});
