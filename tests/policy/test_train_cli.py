from __future__ import annotations

from pathlib import Path

import pytest
import torch

from policy.ensemble import load_ensemble
from policy.train_cli import build_parser, parse_overrides, run_train

SMALL = ["--set", "num_envs=16", "--set", "num_steps=8", "--set", "total_steps=128", "--set",
         "bc_demo_steps=8", "--set", "bc_pretrain_updates=10"]



def test_parser_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.preset, args.device, args.members, args.out, args.seed) == ("small", "auto", 5, None, 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--preset", "huge"])


def test_overrides_are_typed_and_checked() -> None:
    assert parse_overrides(["total_steps=1e5", "lr=3e-4", "anneal_lr=false", "num-envs=8"]) == {
        "total_steps": 100_000, "lr": 3e-4, "anneal_lr": False, "num_envs": 8}
    # A tuple of paths is comma-separated (a bare tuple("a.npz") would be its characters).
    assert parse_overrides(["demo_files=a.npz, b.npz"]) == {"demo_files": ("a.npz", "b.npz")}
    assert parse_overrides(["demo_files="]) == {"demo_files": ()}
    for bad in (["nope=1"], ["num_envs"], ["num_envs=x"], ["anneal_lr=maybe"], ["seed=3"]):
        with pytest.raises(ValueError, match="bad --set"):
            parse_overrides(bad)


def test_train_command_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ens"
    args = build_parser().parse_args(["--preset", "tiny", "--device", "cpu", "--members", "2", "--seed", "3",
                                      "--out", str(out), "--eval-steps", "2", *SMALL])
    assert run_train(args) == 0
    text = capsys.readouterr().out
    assert "member 0 (seed 3) trained" in text and "member 1 (seed 4) trained" in text
    assert "eval reward" in text and f"written to {out}" in text
    ens = load_ensemble(out)
    assert len(ens) == 2 and ens.policy_version in text

    assert run_train(args) == 0  # rerun: nothing left to do
    assert text.count("trained") == 2 and capsys.readouterr().out.count("skipped") == 2


def test_train_command_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parse = build_parser().parse_args
    assert run_train(parse(["--members", "0", "--out", str(tmp_path)])) == 2
    assert run_train(parse(["--set", "bogus=1", "--out", str(tmp_path)])) == 2
    if not torch.cuda.is_available():
        assert run_train(parse(["--device", "cuda", "--out", str(tmp_path)])) == 2
    assert capsys.readouterr().err.count("error:") >= 2
