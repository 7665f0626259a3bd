"""Handing the fine-tuning stage to a launcher such as ``torchrun`` (several GPUs or nodes).

The retraining run itself stays one process: it holds the lock, reads the window, calibrates,
gates and writes the registry. Only the fine-tuning leaves it: :func:`launch` writes what the
trainer needs to ``<run>/finetune/job.json`` (the incumbent, the calibrated start states, the
demonstrations, the budget and seed), runs ``<launcher> -m app.cli retrain-worker <job>`` and
waits. Under torchrun every rank runs :func:`work`: rank 0 fine-tunes the members into the
candidate folder (:func:`app.retraining.finetune.finetune`, each member data-parallel over all
ranks) and the others follow it. Rank 0's progress comes back as lines that start with
:data:`PROGRESS`; anything else the launcher prints goes to the log. A launcher that exits
non-zero fails the stage (:class:`LaunchFailed`, one line); members already saved are kept,
so the rerun continues with the next one.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PROGRESS = "greentwin-retrain-progress "
"""Prefix of the worker's progress lines (JSON after it) among the launcher's own output."""
WORKER = ("-m", "app.cli", "retrain-worker")
"""What follows the launcher: torchrun's form for a Python module (``python -m``)."""

Emit = Callable[..., None]


class LaunchFailed(RuntimeError):
    """The launcher could not be started or exited non-zero; the message is one line."""


def write_job(path: Path, *, incumbent: Path, out: Path, parent: str, iterations: int, num_envs: int,
              num_steps: int, seed: int, demos: str | None, start_states: Sequence[dict[str, Any]],
              device: str) -> Path:
    """The worker's job file: everything the fine-tuning reads, as plain JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    job = {"incumbent": str(incumbent), "out": str(out), "parent": parent, "iterations": iterations,
           "num_envs": num_envs, "num_steps": num_steps, "seed": seed, "demos": demos,
           "start_states": list(start_states), "device": device}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(job, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return path


def command(launcher: str, job: Path) -> list[str]:
    """The launcher's words, then the worker module and the job file."""
    words = shlex.split(launcher)
    if not words:
        raise ValueError("empty launcher: fine-tune in-process instead")
    return [*words, *WORKER, str(job)]


def launch(launcher: str, job: Path, report: Emit, tail_lines: int = 20) -> None:
    """Run the worker under ``launcher``; relays its progress to ``report``; LaunchFailed unless it
    exits 0."""
    cmd = command(launcher, job)
    log.info("fine-tuning under %s", shlex.join(cmd))
    tail: deque[str] = deque(maxlen=tail_lines)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    except OSError as exc:
        raise LaunchFailed(f"launcher {shlex.split(launcher)[0]!r} could not start: "
                           f"{exc.strerror or exc}") from exc
    assert proc.stdout is not None
    with proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            fields = _progress(line)
            if fields is not None:
                report(fields.pop("event"), **fields)
            elif line.strip():
                tail.append(line)
                log.info("launcher: %s", line)
    if proc.returncode != 0:
        if tail:
            log.error("the fine-tuning launcher exited with %s; its last output:\n%s", proc.returncode,
                      "\n".join(tail))
        said = [t.strip() for t in tail if any(c.isalnum() for c in t)]  # not torchrun's ==== rulers
        last = said[-1][:200] if said else "no output"
        raise LaunchFailed(f"launcher '{launcher}' exited with code {proc.returncode}; last output: {last}")


def _progress(line: str) -> dict[str, Any] | None:
    """The fields of a worker's progress line (torchrun may put a rank prefix in front), else None."""
    at = line.find(PROGRESS)
    if at < 0:
        return None
    try:
        fields = json.loads(line[at + len(PROGRESS):])
    except ValueError:
        return None
    return fields if isinstance(fields, dict) and isinstance(fields.get("event"), str) else None


def work(job_file: Path, emit: Emit) -> int:
    """One rank of the worker: rank 0 fine-tunes and reports through ``emit``, the others follow."""
    from app.retraining.finetune import finetune
    from policy import distributed
    from policy.ppo import train
    from twin.config import StartState

    job = json.loads(job_file.read_text(encoding="utf-8"))
    created = distributed.init_from_env(job["device"])
    ctx = distributed.context()
    try:
        if not ctx.is_main:  # rank 0's weights and training path reach this rank when each member starts
            distributed.follow(train)
            return 0
        try:
            manifest = finetune(
                Path(job["incumbent"]), Path(job["out"]), iterations=int(job["iterations"]),
                num_envs=int(job["num_envs"]), num_steps=int(job["num_steps"]), seed=int(job["seed"]),
                demos=Path(job["demos"]) if job.get("demos") else None, parent=str(job["parent"]),
                start_states=[StartState.of(s) for s in job["start_states"]], device=job["device"],
                on_member=lambda done, total: emit("member", done=done, members=total, ranks=ctx.world_size))
        finally:
            distributed.release_followers()
        emit("finetuned", candidate=manifest["policy_version"], ranks=ctx.world_size)
        return 0
    finally:
        if created:
            distributed.shutdown()


def emit_line(event: str, **fields: Any) -> None:
    """A progress line for :func:`launch` to relay (on standard output, flushed)."""
    sys.stdout.write(PROGRESS + json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()
