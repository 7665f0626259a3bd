"""Stage 3: fine-tune a candidate ensemble from the incumbent (PPO + behaviour cloning).

Each member starts from the incumbent member's weights and its own training recipe (residual or
not, network size) and trains in the calibrated twin, its episodes starting from the window's
logged states (:mod:`app.retraining.starts`), with a small budget (``iterations`` rollouts of
``num_envs`` x ``num_steps``) and the window's operator overrides as demonstrations in the BC
term. Members are saved one by one, so a killed run skips the finished ones when it resumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from policy.checkpoint import (
    build_meta,
    member_dir,
    read_ensemble_manifest,
    read_meta,
    save_member,
    write_ensemble_manifest,
)
from policy.config import PPOConfig
from policy.ppo import train
from twin.config import StartState

CALIBRATED_KEYS = ("start_states", "zone_soils", "fixed_soils")
"""Twin overrides that describe one night's greenhouses: the incumbent's are replaced, not kept."""


def member_config(train_config: dict[str, Any], *, iterations: int, num_envs: int, num_steps: int,
                  seed: int, demos: Path | None, start_states: Sequence[StartState] = (),
                  device: str = "cpu") -> PPOConfig:
    """The incumbent member's recipe with the fine-tuning budget, in the calibrated twin: its
    episodes start from ``start_states`` (each in its greenhouse's fitted soils) when given."""
    fields = dict(train_config)
    fields["demo_files"] = (str(demos),) if demos is not None else ()
    fields["lamp_demo_files"] = ()  # the incumbent learnt them; fine-tuning skips the cloning anyway
    # The leash holds the candidate to the incumbent, not to the rule the incumbent started from:
    # continued from the shipped weights for 80 iterations, PPO leashed to the served rule gave back
    # the whole lamp gain (validation 1.966 -> 1.848, served 1.846), leashed to its start it kept
    # most of it (1.923), so a nightly fine-tune to served would walk each incumbent back to the rule.
    fields["prior_kl_to"] = "start"
    # An incumbent trained on the fixed reward scale hands over a critic of the same scale: the
    # fine-tune's budget goes to the policy. One trained on a running scale hands over a critic of
    # another scale, which one iteration of its own relearns before it judges the policy.
    fields["critic_warmup_iterations"] = 0 if fields.get("fixed_reward_scale") else min(1, iterations - 1)
    overrides = [tuple(kv) for kv in fields.get("twin_overrides") or () if kv[0] not in CALIBRATED_KEYS]
    if start_states:
        overrides.append(("start_states", tuple(start_states)))
    fields["twin_overrides"] = tuple(overrides)
    batch = num_envs * num_steps
    minibatches = max(1, min(int(fields.get("num_minibatches", 4)), batch))
    while batch % minibatches:
        minibatches -= 1
    known = set(PPOConfig.__dataclass_fields__)
    fields = {k: v for k, v in fields.items() if k in known}
    fields.update(num_envs=num_envs, num_steps=num_steps, total_steps=iterations * batch, seed=seed,
                  num_minibatches=minibatches, workers=0, device=device,
                  # the incumbent's BC weight has decayed already; the overrides keep a small pull
                  bc_decay_steps=max(batch, iterations * batch))
    return PPOConfig(**fields)


def finetune(incumbent: Path, out: Path, *, iterations: int, num_envs: int, num_steps: int, seed: int,
             demos: Path | None, parent: str, on_member: Callable[[int, int], None] | None = None,
             start_states: Sequence[StartState] = (), device: str = "cpu") -> dict[str, Any]:
    """Train the candidate into ``out``; returns its manifest (``policy_version``...).

    Under torchrun (a process group of several ranks) this is rank 0's part: every member trains
    data-parallel with all ranks, which follow it (:func:`policy.distributed.follow`); only this
    process writes. Each member's metrics record the ranks it trained on (``world_size``).
    """
    from policy.distributed import context

    world_size = context().world_size
    manifest = read_ensemble_manifest(incumbent)
    entries = manifest["members"]
    out.mkdir(parents=True, exist_ok=True)
    dirs = []
    for k, entry in enumerate(entries):
        d = member_dir(out, k)
        dirs.append(d)
        if (d / "meta.json").exists():
            continue
        src = incumbent / entry["dir"]
        meta = read_meta(src)
        cfg = member_config(meta.get("train_config") or {}, iterations=iterations, num_envs=num_envs,
                            num_steps=num_steps, seed=seed + k, demos=demos, start_states=start_states,
                            device=device)
        state = torch.load(src / "weights.pt", map_location="cpu", weights_only=True)
        start = time.perf_counter()
        result = train(cfg, init_state=state)
        last = result.metrics[-1]._asdict()
        save_member(d, result.agent, build_meta(cfg, seed=seed + k, member=k, metrics={
            "train": last, "train_seconds": time.perf_counter() - start,
            "torch_threads": torch.get_num_threads(), "world_size": world_size,
            "finetuned_from": {"version": manifest["policy_version"], "member": entry["dir"]}}))
        if on_member is not None:
            on_member(k + 1, len(entries))
    return write_ensemble_manifest(out, dirs, extra={"parent": parent,
                                                     "finetuned_from": manifest["policy_version"]})
