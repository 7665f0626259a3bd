// Admins: the policy version each greenhouse runs, the registry, the last retraining run, and the
// ensemble's evaluation metrics per member.
"use strict";
document.addEventListener("DOMContentLoaded", async () => {
  const msg = document.getElementById("policy-msg");
  const t = GT.t;
  const fixed = (v, d) => (v === null || v === undefined ? "–" : v.toFixed(d));
  try {
    const p = await GT.api("GET", "/api/policy");
    const forced = document.querySelector("#in-force tbody");
    for (const v of p.in_force) {
      const tr = GT.el("tr"); tr.append(GT.el("td", "mono", v.policy_version), GT.el("td", "", v.greenhouses.join(", ")));
      forced.append(tr);
    }
    const reg = document.querySelector("#registry tbody");
    for (const r of p.registry) {
      const tr = GT.el("tr"), when = GT.el("td");
      if (r.promoted_at) GT.time(when, r.promoted_at); else when.textContent = "–";
      tr.append(GT.el("td", "mono", r.version), GT.el("td", "", r.status), GT.el("td", "mono", r.parent || "–"),
        when, GT.el("td", "", r.promoted_by || "–"), GT.el("td", "", r.note));
      reg.append(tr);
    }
    const last = p.last_retrain;
    if (last) {
      document.getElementById("retrain-last").textContent =
        t("page.policy.retrain_run", { id: last.id, status: last.status }) +
        (last.candidate ? " " + t("page.policy.candidate", { candidate: last.candidate }) : "") +
        (last.reason ? ` — ${last.reason}` : "");
    }
    if (!p.ensemble) { msg.textContent = p.problem || t("page.policy.no_ensemble"); return; }
    const e = p.ensemble;
    document.getElementById("ens-version").textContent = e.policy_version;
    GT.time(document.getElementById("ens-created"), e.created_at);
    document.getElementById("ens-run").textContent = e.run_hash || "–";
    document.getElementById("ens-count").textContent = String(e.members.length);
    const members = document.querySelector("#members tbody");
    for (const m of e.members) {
      const tr = GT.el("tr");
      const steps = m.eval_steps === null || m.eval_envs === null ? "–" : `${m.eval_steps} × ${m.eval_envs}`;
      tr.append(GT.el("td", "", String(m.member)), GT.el("td", "", m.seed === null ? "–" : String(m.seed)),
        GT.el("td", "num", fixed(m.eval_mean_reward, 3)), GT.el("td", "num", steps),
        GT.el("td", "num", fixed(m.eval_terminations, 0)), GT.el("td", "num", fixed(m.train_mean_reward, 3)),
        GT.el("td", "num", fixed(m.train_env_steps, 0)), GT.el("td", "mono", m.weights_sha256.slice(0, 12) + "…"));
      members.append(tr);
    }
  } catch (err) { msg.textContent = err.message; msg.className = "msg bad-text"; }
});
