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
    // The page's words in the reader's language come with the form (login.js loads no catalogue).
    error.textContent = r.status === 401 ? form.dataset.wrong : (data.detail || form.dataset.failed.replace("{status}", String(r.status)));
    error.hidden = false;
  });
});
