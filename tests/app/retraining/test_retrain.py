"""``greentwin retrain`` end to end on a small seeded window: calibration, fine-tuning, the gate,
the registry, resuming after a stop, the lock, the exit codes."""

from __future__ import annotations

import json
import math
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from app import registry
from app.cli import db as db_cli
from app.cli.retrain import retrain
from app.core.config import DEFAULT_POLICY_DIR
from app.core.db import make_engine, make_session_factory
from app.models import Decision, RetrainRun
from app.retraining import EXIT_ERROR, EXIT_LOCKED, EXIT_PROMOTED, EXIT_REFUSED
from app.retraining.gate import run_gate, worse_metrics
from app.retraining.lock import Locked, lock_path, run_lock
from app.retraining.pipeline import RetrainOptions, run_retrain
from app.retraining.runs import last_run
from app.services.greenhouses import add_greenhouse
from policy.checkpoint import member_dir, read_meta, sha256_file, write_ensemble_manifest
from twin.calibration import SoilLog, simulate_zone
from twin.config import TwinConfig
from twin.env import GreenhouseTwin

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)  # the run reads the window before now
TRUTH = {"field_capacity": 0.31, "wilting_point": 0.15, "saturation": 0.45, "hourly_retention": 0.90,
         "root_mm": 300.0, "theta0": 0.27}
"""The soil the synthetic greenhouse really has: wetter and faster-draining than the loam table."""
TINY = RetrainOptions(window_days=3.0, iterations=1, num_envs=8, num_steps=16, scenarios=1, eval_days=0.25,
                      instances=2, replay_days=0.25, seed=0, start_states=24, distance_instances=4)


def _window_rows(gh: str, steps: int = 96, dt_s: float = 1800.0) -> list[Decision]:
    """Two days of decisions whose logged moisture follows the TRUTH bucket (seeded noise)."""
    rng = np.random.default_rng(7)
    hours = (np.arange(steps) * dt_s / 3600.0) % 24.0
    etc = 0.3 * (dt_s / 3600.0) * np.clip(np.sin(np.pi * (hours - 6.0) / 12.0), 0.0, None)
    rows = []
    moist = []
    irrigation = np.zeros((steps, 6))
    for z in range(6):
        irrigation[(np.arange(steps) + 3 * z) % 12 == 0, z] = 5.0
        log = SoilLog(np.zeros(steps), irrigation[:, z], etc, dt_s)
        moist.append(simulate_zone(TRUTH, log) + rng.normal(0.0, 0.002, steps))
    start = NOW - timedelta(seconds=dt_s * steps)
    for t in range(steps):
        rows.append(Decision(
            greenhouse_id=gh, seq=t + 1, ts=start + timedelta(seconds=dt_s * t), actor="policy:x",
            mode="auto",
            telemetry={"soil_vwc": [[float(moist[z][t]), None] for z in range(6)]},
            estimate={"etc_mm": float(etc[t]), "irrigation_mm": irrigation[t].tolist(),
                      "theta": [float(moist[z][t]) for z in range(6)],
                      "crop_twin": {"crop_day": 70.0 + t * dt_s / 86400}},
            member_actions=[], voted={}, clipped={}, rules_fired=[], reward_terms=None, confidence=1.0,
            explanation=None, cmd_id=str(uuid.UUID(int=t + 1 + 1000 * len(gh))), ack_status="applied"))
    obs = GreenhouseTwin(num_instances=3, backend="numpy", seed=0).reset()
    for k in range(3):  # operator overrides with the observation they acted on: the BC demonstrations
        rows.append(Decision(
            greenhouse_id=gh, seq=steps + 1 + k, ts=NOW - timedelta(minutes=10 - k), actor="operator:ann",
            mode="manual", telemetry={}, estimate={"observation": np.asarray(obs[k], dtype=float).tolist()},
            member_actions=[], voted={},
            clipped={"valves": [1, 0, 0, 0, 0, 1], "pump_pct": 60.0, "light_pct": 0.0},
            rules_fired=[], reward_terms=None, confidence=1.0, explanation=None,
            cmd_id=str(uuid.uuid4()), ack_status="applied"))
    return rows


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6, soil="loam")
    engine = make_engine(url)
    with make_session_factory(engine)() as s:
        s.add_all(_window_rows("gh1"))
        s.commit()
    engine.dispose()
    return url


def _bad_ensemble(out: Path) -> Path:
    """The shipped ensemble made dry: every valve biased shut. (Not dark too: over the gate's one-day
    window, lamps off save as much electricity as the fruit they would have grown is worth.)"""
    manifest = json.loads((DEFAULT_POLICY_DIR / "ensemble.json").read_text())
    dirs = []
    for k, entry in enumerate(manifest["members"]):
        src, d = DEFAULT_POLICY_DIR / entry["dir"], member_dir(out, k)
        d.mkdir(parents=True)
        state = torch.load(src / "weights.pt", weights_only=True)
        bias = state["actor_head.bias"].clone()
        bias[:6] -= 6.0  # valve logits
        state["actor_head.bias"] = bias
        torch.save(state, d / "weights.pt")
        meta = read_meta(src) | {"weights_sha256": sha256_file(d / "weights.pt")}
        (d / "meta.json").write_text(json.dumps(meta))
        dirs.append(d)
    write_ensemble_manifest(out, dirs)
    return out


def test_gate_promotes_a_better_candidate_and_refuses_a_worse_one(tmp_path: Path) -> None:
    bad = _bad_ensemble(tmp_path / "bad")
    # Four days: a house run at 87 % humidity transpires little in winter, so a dry policy costs fruit
    # (more than the water it saves) only once the root zone has run down, after a day or two.
    better = run_gate(DEFAULT_POLICY_DIR, bad, [], scenarios=2, days=4.0, instances=2, replay_days=4.0)
    assert better["promote"], better["reason"]
    assert better["profit_diff"]["ci_low"] > 0
    worse = run_gate(bad, DEFAULT_POLICY_DIR, [], scenarios=2, days=0.5, instances=2, replay_days=0.5)
    assert not worse["promote"]
    assert "stress_hours worse" in worse["reason"] and "yield_kg_m2 worse" in worse["reason"]


def test_the_gate_counts_a_difference_only_beyond_its_margin() -> None:
    inc = {"yield_kg_m2": 2.0, "stress_hours": 3.0, "hard_terminations": 0, "safety_clips": 4}
    within = {"yield_kg_m2": 2.0 * (1 - 5e-4), "stress_hours": 3.1, "hard_terminations": 0, "safety_clips": 4}
    assert worse_metrics(within, inc) == []  # a fifth-digit yield and a part-step of stress are no difference
    beyond = {"yield_kg_m2": 2.0 * (1 - 2e-3), "stress_hours": 3.2, "hard_terminations": 1, "safety_clips": 5}
    assert [w.split()[0] for w in worse_metrics(beyond, inc)] == ["yield_kg_m2", "stress_hours",
                                                                   "hard_terminations", "safety_clips"]
    better = {"yield_kg_m2": 2.5, "stress_hours": 0.0, "hard_terminations": 0, "safety_clips": 0}
    assert worse_metrics(better, inc) == []


def test_a_stopped_run_resumes_and_makes_a_candidate(url: str, tmp_path: Path) -> None:
    root = tmp_path / "retrain"
    events: list[dict[str, Any]] = []

    def progress(event: str, **fields: Any) -> None:
        events.append({"event": event, **fields})

    stopped = retrain(url, DEFAULT_POLICY_DIR, root,
                      RetrainOptions(**{**TINY.__dict__, "stop_after": "calibrate"}), progress)
    assert stopped == EXIT_ERROR
    run_id = (root / "CURRENT").read_text().strip()
    assert sorted(p.name for p in (root / "runs" / run_id).glob("*.json")) == [
        "calibrate.json", "run.json", "window.json"]
    calibration = json.loads((root / "runs" / run_id / "calibrate.json").read_text())["greenhouses"][0]
    # The fit finds the wetter, faster-draining soil: much closer to the log than the loam table.
    assert calibration["rmse_after"] < 0.5 * calibration["rmse_before"]
    assert calibration["distance_after"] < calibration["distance_before"]
    assert math.isclose(calibration["zones"][0]["after"]["params"]["field_capacity"], TRUTH["field_capacity"],
                        abs_tol=0.03)
    window = json.loads((root / "runs" / run_id / "window.json").read_text())
    assert window["demos"] == 3 and window["greenhouses"][0]["steps"] == 96
    # Episodes start from logged states: a seeded sample of the window's steps, in the fitted soils.
    starts = calibration["start_states"]
    assert len(starts) == TINY.start_states
    assert all(70.0 <= s["crop_day"] <= 72.0 and s["zone_soils"] == calibration["zone_soils"] for s in starts)
    logged_hours = {round((t.ts - t.ts.replace(month=1, day=1, hour=0, minute=0, second=0)).total_seconds()
                          / 3600, 3)
                    for t in _window_rows("gh1")}
    assert {round(s["hour_of_year"], 3) for s in starts} <= logged_hours
    # ... which brings the twin's states closer to the logged ones than the table twin's random starts.
    dist = calibration["distribution"]
    assert dist["start_moisture"]["after"] < 0.25 * dist["start_moisture"]["before"]
    assert dist["rollout_moisture"]["after"] < dist["rollout_moisture"]["before"]
    assert math.isfinite(dist["daily_irrigation_mm"]["before"]) \
        and math.isfinite(dist["daily_irrigation_mm"]["after"])

    events.clear()
    code = retrain(url, DEFAULT_POLICY_DIR, root, TINY, progress)
    assert code in (EXIT_PROMOTED, EXIT_REFUSED)
    assert events[0] == {"event": "run", "run": run_id, "resumed": True, "done": ["window", "calibrate"],
                         "attempt": 2}
    started = [e["stage"] for e in events if e["event"] == "stage" and e["state"] == "start"]
    assert started == ["finetune", "gate", "promote"]
    assert not (root / "CURRENT").exists()

    engine = make_engine(url)
    sessions = make_session_factory(engine)
    shipped = registry.manifest_version(DEFAULT_POLICY_DIR)
    [candidate] = [v for v in registry.list_versions(sessions) if v.version != shipped]
    assert candidate.parent == shipped \
        and candidate.status == ("promoted" if code == EXIT_PROMOTED else "refused")
    assert candidate.calibration and candidate.metrics and candidate.data_to is not None
    run = last_run(sessions)
    assert run is not None and run["id"] == run_id and run["candidate"] == candidate.version
    assert run["status"] == ("promoted" if code == EXIT_PROMOTED else "refused")
    assert set(run["summary"]["stages"]) == {"window", "calibrate", "finetune", "gate", "promote"}
    tuned = read_meta(Path(candidate.directory) / "member_0")
    assert tuned["metrics"]["finetuned_from"]["version"] == shipped
    assert tuned["train_config"]["demo_files"]  # the operator overrides were in the BC term
    # It trained in the calibrated twin, from the logged starts; the registry records that twin.
    assert len(tuned["twin_config"]["start_states"]) == TINY.start_states
    assert candidate.config_hash == tuned["twin_config_hash"] != TwinConfig().config_hash()
    assert run["summary"]["stages"]["calibrate"]["greenhouses"][0]["distribution"]["start_moisture"][
        "after"] >= 0
    engine.dispose()


def test_a_run_that_keeps_failing_is_abandoned_for_a_new_one(url: str, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """After max_attempts starts (or a day) an unfinished run is closed as failed and a new one starts."""
    import logging

    root = tmp_path / "retrain"
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    events: list[dict[str, Any]] = []
    failing = RetrainOptions(**{**TINY.__dict__, "stop_after": "window", "max_attempts": 2})

    def start(now: datetime) -> str:
        events.clear()
        out = run_retrain(sessions, DEFAULT_POLICY_DIR, root, failing,
                          lambda e, **f: events.append({"event": e, **f}), now=now)
        assert out.code == EXIT_ERROR
        return out.run_id

    first = start(NOW)
    assert start(NOW) == first and events[0]["attempt"] == 2  # resumed once
    with caplog.at_level(logging.WARNING, logger="app.retraining.pipeline"):
        second = start(NOW)
    assert second != first and events[0] == {"event": "abandoned", "run": first,
                                              "reason": "2 attempts did not finish it (at most 2); "
                                                        "stages done: window"}
    assert events[1]["resumed"] is False and events[1]["attempt"] == 1
    assert f"retraining run {first} abandoned: 2 attempts" in caplog.text
    with sessions() as s:
        old = s.get(RetrainRun, first)
        assert old is not None and old.status == "failed" and old.finished_at is not None
        assert old.reason.startswith("abandoned: 2 attempts") and "abandoned" in old.summary

    third = start(NOW + timedelta(hours=25))  # one attempt only, but a day old
    assert third not in (first, second)
    assert events[0]["run"] == second and events[0]["reason"].startswith("started 25.0 h ago (at most 24 h)")
    assert (root / "CURRENT").read_text().strip() == third
    engine.dispose()


def test_an_abandoned_run_s_unjudged_candidate_is_refused(url: str, tmp_path: Path) -> None:
    from app.retraining.runs import RunDir

    engine = make_engine(url)
    sessions = make_session_factory(engine)
    shipped = registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
    assert shipped is not None
    root = tmp_path / "retrain"
    stuck = RunDir.new(root, NOW - timedelta(hours=2))
    shutil.copytree(DEFAULT_POLICY_DIR, stuck.root / "candidates" / stuck.run_id)
    registry.add_candidate(sessions, "stuck", stuck.root / "candidates" / stuck.run_id,
                           parent=shipped.version)
    stuck.finish("finetune", {"candidate": "stuck"})
    for _ in range(3):  # three starts that died in the gate
        stuck.count_attempt()
    out = run_retrain(sessions, DEFAULT_POLICY_DIR, root,
                      RetrainOptions(**{**TINY.__dict__, "stop_after": "window"}),
                      lambda *a, **k: None, now=NOW)
    assert out.run_id != stuck.run_id
    info = registry.get(sessions, "stuck")
    assert info is not None and info.status == "refused" and "abandoned" in info.note
    assert registry.promoted(sessions).version == shipped.version  # type: ignore[union-attr]
    engine.dispose()


def test_a_second_run_is_refused_while_one_holds_the_lock(url: str, tmp_path: Path) -> None:
    """The lock lives with the database: a run with another ``--dir`` on the same SQLite file is refused."""
    engine = make_engine(url)
    assert lock_path(engine) == tmp_path / "gt.sqlite3.retrain.lock"
    with run_lock(engine):
        for root in (tmp_path / "retrain", tmp_path / "elsewhere"):
            assert retrain(url, DEFAULT_POLICY_DIR, root, TINY, lambda *a, **k: None) == EXIT_LOCKED
            assert not (root / "CURRENT").exists()
    engine.dispose()


def test_in_memory_databases_lock_by_url() -> None:
    one, two = make_engine("sqlite://"), make_engine("sqlite://")
    assert lock_path(one) == lock_path(two) != lock_path(make_engine("sqlite:///other.sqlite3"))
    with run_lock(one):
        with pytest.raises(Locked), run_lock(two):
            pytest.fail("a second run took the lock while the first held it")
    with run_lock(two):
        assert lock_path(two).exists()
    one.dispose()
    two.dispose()


@pytest.mark.postgres
def test_advisory_lock_on_postgresql(make_pg_database) -> None:  # type: ignore[no-untyped-def]
    with make_pg_database("h_retrain_lock") as pg:
        one, two = make_engine(pg), make_engine(pg)
        with run_lock(one):
            with pytest.raises(Locked), run_lock(two):
                pytest.fail("a second run took the lock while the first held it")
        taken = False
        with run_lock(two):  # released with the first run
            taken = True
        assert taken
        one.dispose()
        two.dispose()


def test_rollback_after_a_promotion(url: str, tmp_path: Path) -> None:
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    shipped = registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
    assert shipped is not None
    folder = tmp_path / "cand"
    shutil.copytree(DEFAULT_POLICY_DIR, folder)
    registry.add_candidate(sessions, "cand", folder, parent=shipped.version)
    registry.promote(sessions, "cand", "retrain:test")
    back, again = registry.rollback(sessions, "cli:ops")
    assert (back.status, again.version) == ("rolled_back", shipped.version)
    engine.dispose()


@pytest.mark.slow
def test_the_demo_schedule_runs_the_command_end_to_end(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The demo's scheduler runs `greentwin retrain` as a child process (JSON lines, an exit code).
    About a minute or two: `pytest tests/app/retraining/test_retrain.py` (part of the default run)."""
    import asyncio
    import logging

    from app.retraining.schedule import RetrainSchedule

    monkeypatch.setenv("GREENTWIN_DATABASE_URL", url)
    budget = ("--days", "3", "--iterations", "1", "--envs", "8", "--steps", "16", "--scenarios", "1",
              "--eval-days", "0.25", "--replay-days", "0.25", "--instances", "2")
    schedule = RetrainSchedule(tmp_path / "retrain", first_s=0.0, every_s=3600.0, budget=budget)
    with caplog.at_level(logging.INFO, logger="app.retraining.schedule"):
        code = asyncio.run(schedule.once())
    assert code in (EXIT_PROMOTED, EXIT_REFUSED), caplog.text
    logged = caplog.text
    for stage in ("window", "calibrate", "finetune", "gate", "promote"):
        assert f"stage={stage} state=done" in logged
    engine = make_engine(url)
    assert last_run(make_session_factory(engine))["status"] in ("promoted", "refused")  # type: ignore[index]
    engine.dispose()


def test_fine_tuning_leashes_the_candidate_to_the_incumbent() -> None:
    # The shipped members light more than the served rule (their lamps are cloned from hindsight):
    # leashed to the served rule, the first update would already pay for that difference and pull
    # the lamps back; leashed to the incumbent it pays nothing until PPO moves.
    from app.retraining.finetune import member_config
    from policy.checkpoint import read_ensemble_manifest
    from policy.ppo import train

    src = DEFAULT_POLICY_DIR / read_ensemble_manifest(DEFAULT_POLICY_DIR)["members"][0]["dir"]
    recipe = read_meta(src)["train_config"]
    assert recipe.get("prior_kl_to", "served") == "served" and recipe["residual"]
    cfg = member_config(recipe, iterations=1, num_envs=8, num_steps=16, seed=0, demos=None)
    assert cfg.prior_kl_to == "start"
    cfg = cfg.replace(update_epochs=1, num_minibatches=1)
    state = torch.load(src / "weights.pt", map_location="cpu", weights_only=True)
    to_incumbent = train(cfg, init_state=state).metrics[0].prior_kl
    to_served = train(cfg.replace(prior_kl_to="served"), init_state=state).metrics[0].prior_kl
    assert abs(to_incumbent) < 1e-4 and to_served > 0.05, (to_incumbent, to_served)


def test_fine_tuning_keeps_the_incumbents_scale_and_warms_a_critic_of_another() -> None:
    from app.retraining.finetune import member_config

    fixed = {"residual": True, "residual_lamp_logit": 3.0, "fixed_reward_scale": True,
             "shaping": "fruit_value", "freeze_obs_norm": True, "lamp_torso": True,
             "critic_warmup_iterations": 2}
    cfg = member_config(fixed, iterations=4, num_envs=8, num_steps=16, seed=0, demos=None)
    assert (cfg.fixed_reward_scale, cfg.shaping, cfg.freeze_obs_norm, cfg.lamp_torso) == (
        True, "fruit_value", True, True)
    assert cfg.critic_warmup_iterations == 0  # the incumbent's critic already speaks this scale
    running = member_config({**fixed, "fixed_reward_scale": False}, iterations=4, num_envs=8, num_steps=16,
                            seed=0, demos=None)
    assert running.critic_warmup_iterations == 1
    assert member_config({**fixed, "fixed_reward_scale": False}, iterations=1, num_envs=8, num_steps=16,
                         seed=0, demos=None).critic_warmup_iterations == 0  # a one-iteration fine-tune
                                                                            # still trains the policy


def test_logged_steps_are_placed_on_the_site_local_clock() -> None:
    from zoneinfo import ZoneInfo

    from app.retraining.window import hour_of_year

    site = ZoneInfo("Europe/Amsterdam")
    assert hour_of_year(datetime(2026, 7, 1, 10, 0, tzinfo=UTC), site) == 181 * 24 + 12.0  # CEST, UTC+2
    assert hour_of_year(datetime(2026, 1, 1, 0, 30, tzinfo=UTC), site) == 1.5  # CET, UTC+1
    assert hour_of_year(datetime(2026, 12, 31, 23, 30), ZoneInfo("UTC")) == 364 * 24 + 23.5  # naive: UTC


def test_the_terminal_shows_each_greenhouse_s_distances(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.retrain import Progress

    progress = Progress(tty=True)
    progress("run", run="r", resumed=False, done=[], attempt=1)
    dist = {"start_moisture": {"before": 0.09, "after": 0.002},
            "rollout_moisture": {"before": 0.08, "after": 0.01},
            "daily_irrigation_mm": {"before": 14.0, "after": 9.5}}
    progress("stage", run="r", stage="calibrate", state="done",
             greenhouses=[{"greenhouse_id": "gh1", "distribution": dist}])
    progress("abandoned", run="old", reason="3 attempts did not finish it")
    progress("end", status="failed", reason="x")
    out = capsys.readouterr().out
    assert ("gh1: logged vs simulated (W1, before -> after calibration): "
            "start_moisture 0.0900 -> 0.0020 m3/m3" in out)
    assert "daily_irrigation_mm 14.0000 -> 9.5000 mm/day" in out
    assert "abandoned run old: 3 attempts did not finish it; starting a new one" in out
