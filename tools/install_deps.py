"""Install the project and its pinned dependencies into the running interpreter's environment,
torch first and its CPU build wherever one can be had.

Why a script and not one pip line: PyPI serves only torch's CUDA build (several GB) for Linux;
the CPU build lives on PyTorch's own index, and a machine may have neither that index nor a local
copy of the wheel. pip cannot express "the CPU build if reachable, else PyPI's", so this picks the
source, says so in one line when it has to fall back, then installs the rest under
``constraints.txt``. ``--dry-run`` resolves the whole install without installing (or downloading
the CUDA build): the packaging test runs it with pip's machine configuration out of reach.

Standard library only: it runs in a venv that has nothing but pip yet.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 10.0
PREFIX = "greentwin set-up:"


@dataclass(frozen=True)
class TorchSource:
    """Where torch comes from: the requirement, pip's source options, and a line to say if any."""

    requirement: str
    pip_args: tuple[str, ...]
    note: str | None = None


def torch_pin(constraints: Path) -> str:
    """The torch version ``constraints.txt`` pins. A local label (``+cpu``) is refused: PyPI has no
    such build, so the pins would not resolve on a machine without the local wheel."""
    for line in constraints.read_text().splitlines():
        found = re.fullmatch(r"torch==(\S+)", line.strip())
        if found:
            version = found.group(1)
            if "+" in version:
                raise ValueError(f"{constraints.name} pins torch=={version}: drop the local label "
                                 f"(torch=={version.split('+')[0]} admits the CPU build and PyPI's)")
            return version
    raise ValueError(f"{constraints.name} pins no torch version")


def index_unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when ``url`` answers as a package index with a torch page, else why not (short)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/torch/", timeout=timeout) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except OSError as exc:  # time-outs, resets
        return str(exc) or type(exc).__name__


def pip(*args: str) -> list[str]:
    """pip of the interpreter running this script, quiet and without the version check."""
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def cpu_build_at_hand(version: str) -> bool:
    """True when pip finds the CPU build without any index (a wheel directory in its
    configuration, e.g. ``find-links``), or it is installed already."""
    probe = pip("install", "--dry-run", "--quiet", "--no-index", "--no-deps", f"torch=={version}+cpu")
    return subprocess.run(probe, capture_output=True, text=True).returncode == 0


def choose_torch_source(version: str, index_url: str, *, at_hand: Callable[[str], bool] = cpu_build_at_hand,
                        unreachable: Callable[[str], str | None] = index_unreachable) -> TorchSource:
    """The CPU build from a wheel at hand, else from the CPU index, else PyPI's build with a note."""
    cpu = f"torch=={version}+cpu"
    if at_hand(version):
        return TorchSource(cpu, ("--no-index",))
    reason = unreachable(index_url)
    if reason is None:
        return TorchSource(cpu, ("--index-url", index_url))
    return TorchSource(f"torch=={version}", (), (
        f"{PREFIX} PyTorch's CPU index {index_url} is unreachable ({reason}): installing torch=={version} "
        "from PyPI instead, its CUDA build (several GB); set TORCH_INDEX_URL to a reachable copy of the "
        "CPU index to avoid that"))


def install_commands(source: TorchSource, extras: str, constraints: Path, *, dry_run: bool,
                     report: Path | None = None) -> list[list[str]]:
    """pip's command lines: torch alone first (its dependencies come with the project's, under the
    pins), then the project. A dry run is one resolution of the whole install, torch included, with
    the CPU index as an extra source where the real install takes torch from it."""
    project = f"{ROOT}[{extras}]" if extras else str(ROOT)
    if not dry_run:
        return [pip("install", "--quiet", "--no-deps", *source.pip_args, source.requirement),
                pip("install", "--quiet", "-c", str(constraints), "-e", project)]
    extra = ("--extra-index-url", source.pip_args[1]) if source.pip_args[:1] == ("--index-url",) else ()
    out = ("--report", str(report)) if report is not None else ()
    # Metadata only: from the index's PEP 658 files where it serves them, else by HTTP range
    # requests into each wheel (fast-deps), so the CUDA build's gigabytes are never fetched.
    dry = ("--dry-run", "--use-feature=fast-deps")
    return [pip("install", *dry, *out, "-c", str(constraints), *extra, source.requirement, "-e", project)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="dev", help="the project's extras to install (default: dev)")
    parser.add_argument("--dry-run", action="store_true", help="resolve everything, install nothing")
    parser.add_argument("--report", type=Path, default=None, help="with --dry-run: pip's JSON report here")
    args = parser.parse_args(argv)
    constraints = ROOT / "constraints.txt"
    try:
        version = torch_pin(constraints)
    except ValueError as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr)
        return 2
    source = choose_torch_source(version, os.environ.get("TORCH_INDEX_URL") or CPU_INDEX)
    if source.note:
        print(source.note, file=sys.stderr)
    for command in install_commands(source, args.extras, constraints, dry_run=args.dry_run,
                                    report=args.report):
        code = subprocess.run(command).returncode
        if code == 0:
            continue
        if "--no-deps" in command:
            print(f"{PREFIX} pip could not install {source.requirement} (exit {code}, its output above): "
                  "make PyPI reachable, or set TORCH_INDEX_URL to a copy of PyTorch's CPU index, or "
                  f"PIP_FIND_LINKS to a directory holding torch-{version}+cpu's wheel", file=sys.stderr)
        else:
            print(f"{PREFIX} pip could not resolve the project under {constraints.name} (exit {code}, its "
                  "output above): make PyPI reachable, or point PIP_INDEX_URL at an index holding every "
                  "pinned version",
                  file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
