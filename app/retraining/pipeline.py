"""One retraining run, stage by stage (:data:`app.retraining.STAGES`), resumable at each stage.

The incumbent is fixed when the window is read: the gate compares against it, and a promotion
is refused if another version was promoted while the run worked (the comparison would be stale).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app import registry
from app.retraining import EXIT_ERROR, EXIT_PROMOTED, EXIT_REFUSED, STAGES
from app.retraining.launch import LaunchFailed
from app.retraining.runs import RunDir, abandon_run, record_run

log = logging.getLogger(__name__)

Report = Callable[..., None]
"""``report(event, **fields)``: progress for a person or a log collector."""


@dataclass(frozen=True)
class RetrainOptions:
    """The budget and window of a run (the defaults are a nightly job's; tests shrink them)."""

    window_days: float = 14.0
    iterations: int = 4
    num_envs: int = 128
    num_steps: int = 64
    scenarios: int = 6
    eval_days: float = 7.0
    instances: int = 4
    replay_days: float = 7.0
    seed: int = 0
    stop_after: str | None = None
    """Stop (exit 1, the run left to resume) once this stage is done: how a crash is rehearsed."""
    site_timezone: str = "UTC"
    """The site's IANA time zone: the logged steps' local time of year, where episodes start."""
    start_states: int = 256
    """Logged steps per greenhouse the fine-tuning's episodes start from (a seeded sample)."""
    distance_instances: int = 16
    """Twin instances of the before/after distribution comparison's served rollout."""
    distance_days: float = 1.0
    """Days of that rollout (whole days: its irrigation is compared per day)."""
    max_attempts: int = 3
    """Starts of one run (the first and its resumptions) before the next start abandons it: a run
    that keeps failing at the same stage must not block every later night."""
    max_age_h: float = 24.0
    """An unfinished run older than this is abandoned, not resumed: its window is a day stale."""
    launcher: str = ""
    """A command that runs the fine-tuning, e.g. ``torchrun --standalone --nproc-per-node 4``
    (:mod:`app.retraining.launch`); empty: in this process."""
    device: str = "cpu"
    """Where the fine-tuning trains: ``cpu``, or ``cuda`` (under torchrun each rank its own GPU)."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or not self.max_age_h > 0:
            raise ValueError("max_attempts must be >= 1 and max_age_h > 0")
        if self.start_states < 1 or self.distance_instances < 1 or not self.distance_days > 0:
            raise ValueError("start_states and distance_instances must be >= 1 and distance_days > 0")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, not {self.device!r}")


@dataclass(frozen=True)
class Outcome:
    code: int
    run_id: str
    reason: str
    summary: dict[str, Any]


class Stopped(RuntimeError):
    """The run stopped on request after a stage (``stop_after``)."""


def run_retrain(sessions: sessionmaker[Session], policy_dir: Path, root: Path, opts: RetrainOptions,
                report: Report, now: datetime | None = None) -> Outcome:
    """Run (or resume) a retraining run; never raises for a failed stage: the outcome says it."""
    now = now or datetime.now(UTC)
    run = _resumable(sessions, root, opts, now, report)
    resumed = run is not None
    if run is None:
        run = RunDir.new(root, now)
    attempt = run.count_attempt()
    report("run", run=run.run_id, resumed=resumed, done=run.done(), attempt=attempt)
    summary: dict[str, Any] = {"options": asdict(opts), "stages": {}}
    incumbent: str | None = None
    stage = "start"
    try:
        record_run(sessions, run.run_id, status="running", summary=summary)
        for stage in STAGES:
            result = run.result(stage)
            if result is None:
                report("stage", run=run.run_id, stage=stage, state="start")
                result = run.finish(stage, _STAGE[stage](sessions, policy_dir, run, opts, now, report))
                report("stage", run=run.run_id, stage=stage, state="done", **_brief(stage, result))
            summary["stages"][stage] = _brief(stage, result)
            incumbent = (run.result("window") or {}).get("incumbent")
            record_run(sessions, run.run_id, status="running", summary=summary, incumbent=incumbent,
                       candidate=(run.result("finetune") or {}).get("candidate"))
            if opts.stop_after == stage and stage != STAGES[-1]:
                raise Stopped(f"stopped after stage {stage} (--stop-after); rerun to continue")
    except Exception as exc:  # noqa: BLE001 - every failure is a run outcome, exit 1, resumable
        reason = f"{stage}: {exc.__class__.__name__}: {exc}" if not isinstance(exc, Stopped) else str(exc)
        if isinstance(exc, LaunchFailed):  # the launcher's output is logged already; no traceback of ours
            log.error("retraining run %s failed in stage %s: %s", run.run_id, stage, exc)
        elif not isinstance(exc, Stopped):
            log.exception("retraining run %s failed in stage %s", run.run_id, stage)
        record_run(sessions, run.run_id, status="failed", summary=summary, incumbent=incumbent, reason=reason,
                   finished=True)
        report("end", run=run.run_id, status="failed", reason=reason)
        return Outcome(EXIT_ERROR, run.run_id, reason, summary)
    final = run.result("promote") or {}
    status = "promoted" if final.get("promoted") else "refused"
    record_run(sessions, run.run_id, status=status, summary=summary, incumbent=incumbent,
               candidate=final.get("candidate"), reason=str(final.get("reason", "")), finished=True)
    run.close()
    report("end", run=run.run_id, status=status, reason=final.get("reason", ""))
    return Outcome(EXIT_PROMOTED if status == "promoted" else EXIT_REFUSED, run.run_id,
                   str(final.get("reason", "")), summary)


def _resumable(sessions: sessionmaker[Session], root: Path, opts: RetrainOptions, now: datetime,
               report: Report) -> RunDir | None:
    """The unfinished run to resume, or None: none, or it was abandoned (too many attempts, too old)."""
    run = RunDir.current(root)
    if run is None:
        return None
    info = run.info()
    age_h = (now - info["started_at"]).total_seconds() / 3600.0
    if info["attempts"] >= opts.max_attempts:
        why = f"{info['attempts']} attempts did not finish it (at most {opts.max_attempts})"
    elif age_h > opts.max_age_h:
        why = f"started {age_h:.1f} h ago (at most {opts.max_age_h:g} h)"
    else:
        return run
    why += f"; stages done: {', '.join(run.done()) or 'none'}"
    log.warning("retraining run %s abandoned: %s; starting a new run", run.run_id, why)
    abandon_run(sessions, run.run_id, why, now)
    candidate = (run.result("finetune") or {}).get("candidate")
    info_row = registry.get(sessions, candidate) if candidate else None
    if info_row is not None and info_row.status == "candidate":  # never gated: it must not look pending
        registry.mark(sessions, candidate, "refused", f"retraining run {run.run_id} abandoned: {why}")
    run.close()
    report("abandoned", run=run.run_id, reason=why)
    return None


def _brief(stage: str, result: dict[str, Any]) -> dict[str, Any]:
    """What the summary keeps of a stage's result (the full result stays in the run folder)."""
    if stage == "window":
        return {k: result[k] for k in ("since", "until", "incumbent", "demos") if k in result} | {
            "greenhouses": [{"id": g["id"], "steps": g["steps"]} for g in result.get("greenhouses", [])]}
    if stage == "calibrate":
        return {"greenhouses": [{k: g.get(k) for k in ("greenhouse_id", "rmse_before", "rmse_after",
                                                       "distance_before", "distance_after", "distribution")}
                                for g in result.get("greenhouses", [])]}
    if stage == "gate":
        return {"promote": result.get("promote"), "reason": result.get("reason"),
                "profit_diff": result.get("profit_diff"),
                "metrics": {name: suite["metrics"] for name, suite in (result.get("suites") or {}).items()}}
    return dict(result)


# ---- the stages ---------------------------------------------------------------------------------


def _window(sessions: sessionmaker[Session], policy_dir: Path, run: RunDir, opts: RetrainOptions,
            now: datetime, report: Report) -> dict[str, Any]:
    from app.retraining.window import newest_decision, read_window

    incumbent = registry.ensure_seeded(sessions, policy_dir)
    if incumbent is None:
        raise registry.RegistryError(f"no promoted policy and no ensemble in {policy_dir}: nothing to "
                                     "fine-tune")
    until = max(now, newest_decision(sessions) or now)  # a plant clock ahead of this one (the demo's)
                                                        # counts too
    since = until - timedelta(days=opts.window_days)
    folder = run.path / "window"
    folder.mkdir(exist_ok=True)
    windows = read_window(sessions, since, until, site_timezone=opts.site_timezone)
    for w in windows:
        w.save(folder / f"{w.greenhouse_id}.npz")
    demos, demo_file = _export_demos(sessions, run.path / "demos.npz", since, until)
    return {"since": since, "until": until, "incumbent": incumbent.version,
            "incumbent_dir": incumbent.directory,
            "greenhouses": [{"id": w.greenhouse_id, "steps": w.steps, "skipped": w.skipped} for w in windows],
            "demos": demos, "demos_file": demo_file}


def _export_demos(sessions: sessionmaker[Session], out: Path, since: datetime, until: datetime
                  ) -> tuple[int, str | None]:
    from app.services.demonstrations import export_demos

    bind = sessions.kw["bind"]
    try:
        result = export_demos(bind.url.render_as_string(hide_password=False), out, since=since, until=until)
    except ValueError:  # no overrides in the window: PPO alone
        return 0, None
    return result.count, str(out)


def _calibrate(sessions: sessionmaker[Session], policy_dir: Path, run: RunDir, opts: RetrainOptions,
               now: datetime, report: Report) -> dict[str, Any]:
    from app.retraining.calibrate import calibrate_greenhouse
    from app.retraining.starts import describe, distances, start_states
    from app.retraining.window import GreenhouseWindow
    from twin.config import DEFAULT_ZONES

    window = run.result("window") or {}
    out = []
    for i, g in enumerate(window.get("greenhouses", [])):
        w = GreenhouseWindow.load(run.path / "window" / f"{g['id']}.npz")
        c = calibrate_greenhouse(w)
        if len(w.soils) == DEFAULT_ZONES:  # the ensemble's layout: its episodes can start here
            starts = start_states(w, c, opts.start_states, seed=opts.seed + i)
            c["start_states"] = [asdict(s) for s in starts]
            c["distribution"] = distances(w, starts, instances=opts.distance_instances,
                                          days=opts.distance_days, seed=opts.seed + i)
        else:
            c["start_states"] = []
            c["distribution"] = {"why": f"{len(w.soils)} zones: the ensemble controls {DEFAULT_ZONES}"}
        log.info("%s", describe(w.greenhouse_id, c["distribution"]))
        out.append(c)
    return {"greenhouses": out}


def _finetune(sessions: sessionmaker[Session], policy_dir: Path, run: RunDir, opts: RetrainOptions,
              now: datetime, report: Report) -> dict[str, Any]:
    from app.retraining.finetune import finetune
    from app.retraining.launch import launch, write_job
    from policy.checkpoint import git_commit, read_ensemble_manifest, read_meta
    from twin import TWIN_VERSION
    from twin.config import StartState

    window = run.result("window") or {}
    calibration = run.result("calibrate") or {}
    out = run.root / "candidates" / run.run_id
    demos = window.get("demos_file")
    # Every greenhouse's logged starts, each in its own calibrated soils: one batch trains in all of them.
    logged = [s for g in calibration.get("greenhouses", []) for s in g.get("start_states") or ()]
    budget = {"iterations": opts.iterations, "num_envs": opts.num_envs, "num_steps": opts.num_steps,
              "seed": opts.seed, "device": opts.device}
    if opts.launcher:
        job = write_job(run.path / "finetune" / "job.json", incumbent=Path(window["incumbent_dir"]), out=out,
                        parent=window["incumbent"], demos=demos, start_states=logged, **budget)
        launch(opts.launcher, job, report)
        manifest = read_ensemble_manifest(out)
    else:
        manifest = finetune(Path(window["incumbent_dir"]), out, demos=Path(demos) if demos else None,
                            parent=window["incumbent"], start_states=[StartState.of(s) for s in logged],
                            on_member=lambda done, total: report("member", done=done, members=total, ranks=1),
                            **budget)
    version = str(manifest["policy_version"])
    first = read_meta(out / manifest["members"][0]["dir"])
    twin_hash = first.get("twin_config_hash")
    registry.add_candidate(
        sessions, version, out, parent=window["incumbent"], data_from=datetime.fromisoformat(window["since"]),
        data_to=datetime.fromisoformat(window["until"]), twin_version=TWIN_VERSION,
        config_hash=twin_hash, git_commit=git_commit(),
        calibration=_brief("calibrate", calibration), note=f"fine-tuned by retraining run {run.run_id}")
    return {"candidate": version, "directory": str(out), "members": len(manifest["members"]),
            "start_states": len(logged),
            "twin": "calibrated, logged starts" if logged else "default (no logged starts)",
            "twin_config_hash": twin_hash, "ranks": (first.get("metrics") or {}).get("world_size", 1),
            "launcher": opts.launcher or "in-process"}


def _gate(sessions: sessionmaker[Session], policy_dir: Path, run: RunDir, opts: RetrainOptions,
          now: datetime, report: Report) -> dict[str, Any]:
    from app.retraining.gate import run_gate
    from app.retraining.runs import plain

    window, tuned = run.result("window") or {}, run.result("finetune") or {}
    calibrations = (run.result("calibrate") or {}).get("greenhouses", [])
    result = run_gate(Path(tuned["directory"]), Path(window["incumbent_dir"]), calibrations,
                      scenarios=opts.scenarios, days=opts.eval_days, instances=opts.instances,
                      replay_days=opts.replay_days, seed=opts.seed)
    info = registry.get(sessions, tuned["candidate"])
    if info is not None and info.status == "candidate":
        registry.add_candidate(sessions, tuned["candidate"], Path(tuned["directory"]),
                               parent=window["incumbent"], metrics=plain(_brief("gate", result)))
    return result


def _promote(sessions: sessionmaker[Session], policy_dir: Path, run: RunDir, opts: RetrainOptions,
             now: datetime, report: Report) -> dict[str, Any]:
    window, tuned, gate = run.result("window") or {}, run.result("finetune") or {}, run.result("gate") or {}
    candidate = tuned["candidate"]
    reason = str(gate.get("reason", ""))
    current = registry.promoted(sessions)
    if gate.get("promote") and current is not None \
            and current.version == candidate:  # a crash after promoting
        return {"promoted": True, "candidate": candidate, "reason": reason}
    if gate.get("promote") and current is not None and current.version != window["incumbent"]:
        reason = (f"{current.version} was promoted while the run compared against {window['incumbent']}: "
                  f"the gate's comparison is stale")
    elif gate.get("promote"):
        registry.promote(sessions, candidate, f"retrain:{run.run_id}", f"gate: {reason}")
        return {"promoted": True, "candidate": candidate, "reason": reason}
    registry.mark(sessions, candidate, "refused", f"gate: {reason}")
    return {"promoted": False, "candidate": candidate, "reason": reason}


_STAGE: dict[str, Callable[[sessionmaker[Session], Path, RunDir, RetrainOptions, datetime, Report],
                           dict[str, Any]]] = {
    "window": _window, "calibrate": _calibrate, "finetune": _finetune, "gate": _gate, "promote": _promote}
