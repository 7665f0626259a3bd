"""``greentwin retrain``: the nightly retraining job (see :mod:`app.retraining`).

Exit codes: 0 the candidate was promoted, 1 error (rerun to resume), 3 the gate refused the
candidate (the incumbent stays), 4 another run holds the lock. On a terminal a progress bar
follows the stages; otherwise every event is one JSON line on standard output.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.retraining import EXIT_ERROR, EXIT_LOCKED, STAGES


def add_retrain_arguments(parser: argparse.ArgumentParser) -> None:
    """The run's window and budget (argparse only; the defaults are a nightly job's)."""
    parser.add_argument("--days", type=float, default=14.0,
                        help="the recent window to read, in days (default 14)")
    parser.add_argument("--iterations", type=int, default=4,
                        help="PPO rollouts per member of the fine-tuning")
    parser.add_argument("--envs", type=int, default=128, help="twin instances per rollout")
    parser.add_argument("--steps", type=int, default=64, help="control steps per instance per rollout")
    parser.add_argument("--scenarios", type=int, default=6, help="held-out scenarios of the gate")
    parser.add_argument("--eval-days", type=float, default=7.0, help="days per gate scenario")
    parser.add_argument("--replay-days", type=float, default=7.0,
                        help="days of each greenhouse's replay in its calibrated twin")
    parser.add_argument("--instances", type=int, default=4, help="greenhouses per gate scenario")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=None, help="runs and candidates (default: GREENTWIN_RETRAIN_DIR)")
    parser.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    parser.add_argument("--max-attempts", type=int, default=3,
                        help="starts of one unfinished run before the next start abandons it for a new one "
                             "(default 3; a run older than a day is abandoned too)")
    parser.add_argument("--stop-after", choices=STAGES[:-1], default=None,
                        help="stop once this stage is done (exit 1; a rerun continues): rehearses a crash")
    parser.add_argument("--launcher", default=None, metavar="COMMAND",
                        help="run the fine-tuning under this command, e.g. 'torchrun --standalone "
                             "--nproc-per-node 4' (default: GREENTWIN_RETRAIN_LAUNCHER; '': in this process)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the fine-tuning trains (cuda under torchrun: each rank its GPU "
                             "LOCAL_RANK)")


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """``greentwin retrain-worker JOB``: what the launcher runs (argparse only)."""
    parser.add_argument("job", help="the fine-tuning's job file, written by `greentwin retrain`")


class Progress:
    """A bar over the stages on a terminal; JSON lines otherwise."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.bar: Any = None

    def __call__(self, event: str, **fields: Any) -> None:
        if not self.tty:
            line = {"ts": datetime.now(UTC).isoformat(timespec="seconds"), "event": event, **fields}
            print(json.dumps(line, default=str, sort_keys=True), flush=True)
            return
        from tqdm import tqdm  # type: ignore[import-untyped]

        if event == "run":
            self.bar = tqdm(total=len(STAGES), initial=len(fields["done"]), unit="stage",
                            desc=f"retrain {fields['run']}")
        elif event == "stage" and self.bar is not None:
            self.bar.set_postfix_str(f"{fields['stage']} {fields['state']}")
            if fields["state"] == "done":
                self.bar.update(1)
            if fields["stage"] == "calibrate" and fields["state"] == "done":
                from app.retraining.starts import describe

                for g in fields.get("greenhouses") or []:
                    self.bar.write(describe(str(g.get("greenhouse_id")), g.get("distribution") or {}))
        elif event == "member" and self.bar is not None:
            self.bar.set_postfix_str(f"finetune member {fields['done']}/{fields['members']} on "
                                     f"{fields['ranks']} rank(s)")
        elif event == "abandoned":
            print(f"abandoned run {fields['run']}: {fields['reason']}; starting a new one")
        elif event == "end":
            if self.bar is not None:
                self.bar.close()
            print(f"{fields['status']}: {fields.get('reason', '')}")


def options(args: argparse.Namespace, site_timezone: str = "UTC", launcher: str = "") -> Any:
    """The run's options; ``launcher`` is the setting's, which ``--launcher`` overrides."""
    from app.retraining.pipeline import RetrainOptions

    return RetrainOptions(site_timezone=site_timezone, window_days=args.days, iterations=args.iterations,
                          num_envs=args.envs, num_steps=args.steps,
                          scenarios=args.scenarios, eval_days=args.eval_days, instances=args.instances,
                          replay_days=args.replay_days, seed=args.seed, stop_after=args.stop_after,
                          max_attempts=args.max_attempts, device=args.device,
                          launcher=(args.launcher if args.launcher is not None else launcher).strip())


def retrain(url: str, policy_dir: Path, root: Path, opts: Any, progress: Any) -> int:
    """Take the lock and run; the exit code."""
    from app.core.db import make_engine, make_session_factory, require_current_schema
    from app.retraining.lock import Locked, run_lock
    from app.retraining.pipeline import run_retrain

    engine = make_engine(url)
    try:
        require_current_schema(engine)
        with run_lock(engine):
            return run_retrain(make_session_factory(engine), policy_dir, root, opts, progress).code
    except Locked as exc:
        progress("end", status="locked", reason=str(exc))
        return EXIT_LOCKED
    finally:
        engine.dispose()


def main(args: argparse.Namespace) -> int:
    from app.core.config import get_settings
    from app.core.db import SchemaOutOfDate

    settings = get_settings()
    try:
        opts = options(args, settings.site_timezone, settings.retrain_launcher)
        return retrain(args.url or settings.database_url, Path(settings.policy_dir),
                       Path(args.dir or settings.retrain_dir), opts, Progress(sys.stdout.isatty()))
    except (SchemaOutOfDate, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def worker_main(args: argparse.Namespace) -> int:
    """``greentwin retrain-worker``: one rank of a launched fine-tuning (see :mod:`app.retraining.launch`)."""
    from app.retraining.launch import emit_line, work

    return work(Path(args.job), emit_line)
