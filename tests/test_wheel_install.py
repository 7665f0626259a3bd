"""The built wheel migrates a database on its own: no checkout, no editable install, no network.

The wheel is built from a copy of the sources (so the checkout gets no ``build/``) and installed
without dependencies into a fresh virtualenv that borrows the test environment's packages through
a ``.pth`` line. That keeps the test offline and fast, while ``app`` and ``migrations`` are
imported from the wheel (asserted), not from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("app", "audit", "control", "migrations", "plantsim", "policy", "safety", "twin", "wire",
           "pyproject.toml", "README.md")

pytestmark = pytest.mark.packaging


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Bin directory of a fresh virtualenv holding only the wheel of this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
          "-q", "-w", str(dist), str(src)], cwd=tmp)
    [wheel] = dist.glob("greentwin-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp).strip())
    # Dependencies come from the test environment, after the venv's own site-packages.
    (purelib / "zz_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          str(wheel)], cwd=tmp)
    where = _run([str(python), "-c",
                  "import app, migrations; print(app.__file__); print(*migrations.__path__)"],
                 cwd=tmp).split()
    assert all(Path(p).is_relative_to(purelib) for p in where), f"imported from outside the wheel: {where}"
    yield venv / "bin"


@pytest.fixture
def greentwin(installed: Path, tmp_path: Path) -> Callable[..., str]:
    """Run the installed ``greentwin`` in an empty directory with only the given settings."""

    def run(*args: str, url: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GREENTWIN_", "PYTHON"))}
        env["GREENTWIN_DATABASE_URL"] = url
        return _run([str(installed / "greentwin"), *args], cwd=tmp_path, env=env)

    return run


def _head() -> str:
    from app.core.db import head_revisions

    return ",".join(sorted(head_revisions()))


def test_wheel_migrates_a_new_sqlite_database(greentwin: Callable[..., str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    assert greentwin("db", "current", url=url).strip() == "none (not migrated)"
    greentwin("db", "upgrade", url=url)
    assert greentwin("db", "current", url=url).strip() == _head()


@pytest.mark.postgres
def test_wheel_migrates_a_new_postgres_database(greentwin: Callable[..., str],
                                                make_pg_database: Callable) -> None:
    with make_pg_database("greentwin_wheel") as url:
        plain = url.replace("postgresql+psycopg://", "postgresql://", 1)  # the driver SQLAlchemy picks itself
        greentwin("db", "upgrade", url=plain)
        assert greentwin("db", "current", url=plain).strip() == _head()
