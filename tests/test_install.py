"""The set-up ``make`` runs (``tools/install_deps.py``): torch's source picked as documented, and
the whole install resolving from PyPI alone, without the local torch wheel or pip's machine
configuration.

The resolution test needs https://pypi.org and is skipped, with the reason, where it cannot be
reached (``-m "not network"`` leaves it out). It resolves in a fresh virtualenv and fetches
metadata only: a download of anything over 50 MB (the CUDA build and its libraries) stops it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPI = "https://pypi.org/simple"
TRUST_AND_PROXY = ("PIP_CERT", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "HTTP_PROXY",
                   "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
"""What the isolated install keeps of this machine: whom to trust and the way out, not where packages
come from."""
BIG_DOWNLOAD_MB = 50.0


def _load_installer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_deps", ROOT / "tools" / "install_deps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


install_deps = _load_installer()


def _pins() -> dict[str, str]:
    """Normalised name -> version of every pin in constraints.txt."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[_norm(name)] = version
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_norm(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


# --- offline: the pins and the choice of torch's source -----------------------------------------


def test_pins_resolve_without_local_builds() -> None:
    """No pin carries a local label (``+cpu``): PyPI serves no such build, so it would resolve only
    where the wheel lies on disk."""
    local = {name: v for name, v in _pins().items() if "+" in v}
    assert not local, f"constraints.txt pins local builds: {local}"
    assert install_deps.torch_pin(ROOT / "constraints.txt") == _pins()["torch"]


def test_every_declared_dependency_is_pinned() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"] + project["optional-dependencies"]["dev"])
    assert declared - set(_pins()) == set(), "regenerate constraints.txt (see its header)"


def test_a_local_torch_pin_is_refused_in_one_line(tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("numpy==2.4.6\ntorch==2.13.0+cpu\n")
    with pytest.raises(ValueError, match=r"torch==2\.13\.0\+cpu: drop the local label") as caught:
        install_deps.torch_pin(constraints)
    assert "\n" not in str(caught.value)
    constraints.write_text("numpy==2.4.6\n")
    with pytest.raises(ValueError, match="pins no torch"):
        install_deps.torch_pin(constraints)


class _Index(BaseHTTPRequestHandler):
    """A package index that knows torch and nothing else."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        known = self.path.rstrip("/") == "/whl/cpu/torch"
        self.send_response(200 if known else 404)
        self.end_headers()
        self.wfile.write(b"<html><body>torch</body></html>" if known else b"")

    def log_message(self, *_args: object) -> None:
        return


@pytest.fixture
def index_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port_url() -> str:
    server = HTTPServer(("127.0.0.1", 0), _Index)
    port = server.server_address[1]
    server.server_close()
    return f"http://127.0.0.1:{port}/whl/cpu"


def test_probe_tells_an_index_from_a_wrong_or_dead_address(index_url: str) -> None:
    assert install_deps.index_unreachable(index_url, timeout=5) is None
    assert install_deps.index_unreachable(index_url.replace("/whl/cpu", "/simple"), timeout=5) == "HTTP 404"
    reason = install_deps.index_unreachable(_closed_port_url(), timeout=5)
    assert reason and "refused" in reason.lower()


def test_torch_from_a_wheel_at_hand_then_the_cpu_index_then_pypi(index_url: str) -> None:
    at_hand = install_deps.choose_torch_source("2.13.0", index_url, at_hand=lambda _v: True)
    assert at_hand == install_deps.TorchSource("torch==2.13.0+cpu", ("--no-index",))

    cpu = install_deps.choose_torch_source("2.13.0", index_url, at_hand=lambda _v: False)
    assert cpu == install_deps.TorchSource("torch==2.13.0+cpu", ("--index-url", index_url))

    dead = _closed_port_url()
    pypi = install_deps.choose_torch_source("2.13.0", dead, at_hand=lambda _v: False)
    assert pypi.requirement == "torch==2.13.0" and pypi.pip_args == ()
    assert pypi.note is not None and "\n" not in pypi.note
    assert pypi.note.startswith("greentwin set-up:") and dead in pypi.note and "TORCH_INDEX_URL" in pypi.note


def test_install_commands_install_torch_alone_then_the_project_under_the_pins(index_url: str) -> None:
    constraints = ROOT / "constraints.txt"
    source = install_deps.TorchSource("torch==2.13.0+cpu", ("--index-url", index_url))
    torch, project = install_deps.install_commands(source, "dev", constraints, dry_run=False)
    assert torch[-4:] == ["--no-deps", "--index-url", index_url, "torch==2.13.0+cpu"]
    assert "--dry-run" not in torch + project
    assert project[-4:] == ["-c", str(constraints), "-e", f"{ROOT}[dev]"]

    report = Path("r.json")
    [project] = install_deps.install_commands(source, "dev", constraints, dry_run=True, report=report)
    assert "--dry-run" in project and "--no-deps" not in project
    assert project[project.index("--report") + 1] == str(report)
    # The dry run resolves torch with everything else, where the real install took it from.
    assert project[project.index("--extra-index-url") + 1] == index_url and "torch==2.13.0+cpu" in project


def test_make_runs_the_installer_and_passes_the_demo_its_port_and_broker() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    shown = subprocess.run(["make", "-n", "-B", "demo", "PORT=8011", "MQTT_URL=mqtt://127.0.0.1:18830"],
                           cwd=ROOT, capture_output=True, text=True, env=env, timeout=30, check=True).stdout
    assert "tools/install_deps.py" in shown
    demo = [line for line in shown.splitlines() if "greentwin demo" in line]
    assert len(demo) == 1 and "--port 8011" in demo[0] and "--mqtt-url mqtt://127.0.0.1:18830" in demo[0]
    plain = subprocess.run(["make", "-n", "-B", "demo"], cwd=ROOT, capture_output=True, text=True, env=env,
                           timeout=30, check=True).stdout
    [line] = [line for line in plain.splitlines() if "greentwin demo" in line]
    assert "--port 8000" in line and "--mqtt-url" not in line  # the broker: GREENTWIN_MQTT_URL or the default


# --- online: the whole install from PyPI alone ----------------------------------------------------


def _pypi_unreachable() -> str | None:
    return install_deps.index_unreachable(PYPI, timeout=10)


def _isolated_env(home: Path) -> dict[str, str]:
    """No PIP_* variable but trust and proxy, no configuration file (``PIP_CONFIG_FILE=/dev/null``
    makes pip skip the global, user and site files), an empty home (no cache, no user config)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "PIP_CONFIG_FILE": os.devnull}
    env |= {k: os.environ[k] for k in TRUST_AND_PROXY if k in os.environ}
    return env


def _run_watched(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
    """Run ``cmd``; stop it at the first download over :data:`BIG_DOWNLOAD_MB` (pip prints
    ``Downloading NAME (SIZE)`` before it fetches a whole file)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            big = re.search(r"Downloading \S+ \(([\d.]+) (MB|GB)\)", line)
            if big and float(big.group(1)) * (1024 if big.group(2) == "GB" else 1) > BIG_DOWNLOAD_MB:
                proc.kill()
                pytest.fail(f"the dry run started a real download: {line.strip()}")
        code = proc.wait()
    finally:
        killer.cancel()
    if time.monotonic() > deadline:
        pytest.fail(f"{' '.join(cmd)} ran past {timeout:.0f} s:\n{''.join(lines[-20:])}")
    return code, "".join(lines)


@pytest.mark.network
def test_whole_install_resolves_from_pypi_alone(tmp_path: Path) -> None:
    """In a fresh venv that cannot see the local torch wheel, the local package mirrors or pip's
    machine configuration, ``make``'s installer resolves every package of the install, at the
    pinned versions, torch from PyPI or PyTorch's CPU index."""
    if (reason := _pypi_unreachable()) is not None:
        pytest.skip(f"PyPI unreachable ({reason})")
    src = tmp_path / "src"
    (src / "tools").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "constraints.txt", "tools/install_deps.py"):
        shutil.copy2(ROOT / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = _isolated_env(tmp_path / "home")

    config = subprocess.run([python, "-m", "pip", "config", "list"], env=env, capture_output=True, text=True,
                            check=True, timeout=60).stdout
    sources = [line for line in config.splitlines()
               if not line.startswith((":env:.config-file=", ":env:.cert="))]
    assert sources == [], f"pip still sees configuration: {sources}"

    code, out = _run_watched([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], env, src,
                             timeout=120)
    assert code == 0, out
    report = tmp_path / "report.json"
    started = time.monotonic()
    code, out = _run_watched([python, "tools/install_deps.py", "--dry-run", "--report", str(report)], env,
                             src, timeout=240)
    took = time.monotonic() - started
    assert code == 0, out[-4000:]

    installs = {_norm(i["metadata"]["name"]): i for i in json.loads(report.read_text())["install"]}
    urls = [i["download_info"]["url"] for i in installs.values()
            if _norm(i["metadata"]["name"]) != "greentwin"]
    assert urls and all(u.startswith("https://") for u in urls), \
        [u for u in urls if not u.startswith("https://")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _requirement_names(project["dependencies"] + project["optional-dependencies"]["dev"])
    assert wanted <= set(installs), f"not resolved: {sorted(wanted - set(installs))}"
    pins = _pins()
    torch = installs["torch"]["metadata"]["version"]
    off_pin = {n: i["metadata"]["version"] for n, i in installs.items()
               if n in pins and n != "torch" and i["metadata"]["version"] != pins[n]}
    assert off_pin == {}, "resolved off the pins"
    notes = [line for line in out.splitlines() if line.startswith("greentwin set-up:")]
    if torch == f"{pins['torch']}+cpu":
        assert notes == [] and "download.pytorch.org" in installs["torch"]["download_info"]["url"]
    else:
        # No CPU index here: PyPI's build, and one line saying so and what to do.
        assert torch == pins["torch"] and len(notes) == 1 and "TORCH_INDEX_URL" in notes[0], out[-2000:]
    print(f"install resolved from PyPI alone in {took:.0f} s: {len(installs)} packages, torch {torch}")
