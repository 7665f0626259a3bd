"""``/docs`` and ``/redoc`` are whole without the internet: every asset they name comes from the app.

The pages are fetched in-process with every outbound connection refused, and each script, style
sheet, icon and OpenAPI document they reference is fetched the same way. (The browser test in
``test_dashboard_browser.py`` shows the pages render their operations in Chromium.)
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import re
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.main import create_app

ROOT = Path(__file__).resolve().parents[3]
WEB = ROOT / "app" / "web"
VENDOR = WEB / "static" / "vendor"
SECRET = "api-docs-secret-" + "3f6a9b0c" * 4
ASSET = re.compile(r'(?:src|href)\s*=\s*"([^"]+)"')
SPEC_URL = re.compile(r"""(?:url:\s*'|spec-url=")([^'"]+)""")
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuse every outbound connection (and record who tried): the pages must not need one."""
    tried: list[Any] = []

    def refuse(*args: Any, **_kwargs: Any) -> None:
        tried.append(args[1:] or args)
        raise OSError("offline: no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return tried


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app without its lifespan: the documentation needs no database, broker or control loop."""
    root = tmp_path_factory.mktemp("docs")
    settings = Settings(database_url=f"sqlite:///{root / 'gt.sqlite3'}", mqtt_url="mqtt://127.0.0.1:1",
                        environment="demo", secret_key=SECRET)
    yield TestClient(create_app(settings, state_dir=root / "state"))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_page_and_every_asset_it_names_come_from_the_app(client: TestClient, offline: list[Any],
                                                               page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assets = ASSET.findall(html)
    assert len(assets) >= 2, f"{page} names its script and icon: {assets}"
    specs = SPEC_URL.findall(html)
    assert specs == ["/openapi.json"], f"{page} loads the app's own document: {specs}"
    for url in [*assets, *specs]:
        assert url.startswith("/") and not url.startswith("//"), f"{page} names another site: {url}"
        got = client.get(url)
        assert got.status_code == 200 and len(got.content) > 0, (page, url, got.status_code)
        if url.endswith(".js"):
            assert "javascript" in got.headers["content-type"], url
            assert len(got.content) > 100_000, f"{url} is the whole bundle, not a stub"
        elif url.endswith(".css"):
            assert got.headers["content-type"].startswith("text/css"), url
    assert "openapi" in client.get(specs[0]).json()
    assert offline == [], f"serving {page} tried the network: {offline}"


def test_docs_policy_admits_only_this_origin_and_its_own_inline_script(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        r = client.get(page)
        csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";")
                   if d.strip())
        assert csp["default-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
        for directive, sources in csp.items():
            assert "http" not in sources and "*" not in sources, (page, directive, sources)
        assert "unsafe-inline" not in csp["script-src"] and "unsafe-eval" not in csp["script-src"]
        for script in INLINE_SCRIPT.findall(r.text):  # the bootstrap script runs: the policy names its hash
            digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in csp["script-src"], page


def test_each_vendored_bundle_keeps_its_licence_and_says_where_it_came_from(client: TestClient) -> None:
    bundles = {"swagger-ui": ("swagger-ui-bundle.js", "Apache License"),
               "redoc": ("redoc.standalone.js", "MIT")}
    for folder, (bundle, licence) in bundles.items():
        assert licence in (VENDOR / folder / "LICENSE").read_text(), folder
        assert bundle in (VENDOR / folder / "VERSION.txt").read_text(), folder
        served = client.get(f"/static/vendor/{folder}/LICENSE")
        assert served.status_code == 200 and licence in served.text, folder
    assert "SmartBear" in (VENDOR / "swagger-ui" / "NOTICE").read_text()  # Apache-2.0 asks for its NOTICE


def test_the_package_data_ships_every_vendored_file() -> None:
    """A file the wheel leaves out would 404 after ``pip install``, though every checkout test passes."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "app.web"]
    files = [p.relative_to(WEB).as_posix() for p in VENDOR.rglob("*") if p.is_file()]
    assert len(files) >= 10
    missing = [f for f in files if not any(fnmatch.fnmatchcase(f, pattern) for pattern in patterns)]
    assert missing == [], f"not in [tool.setuptools.package-data] 'app.web': {missing}"
