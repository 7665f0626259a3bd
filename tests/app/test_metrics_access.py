"""Who reads ``/metrics`` in the demo and with a token, against the real app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli import db as db_cli
from app.core.config import Settings
from app.main import create_app

TOKEN = "metrics-test-token-" + "4d" * 16


def _app(root: Path, **settings: object) -> TestClient:
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    return TestClient(create_app(Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1",
                                          policy_dir=root / "none", environment="demo",
                                          secret_key="metrics-access-" + "1f" * 16, **settings),
                                 state_dir=root / "state"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with _app(tmp_path_factory.mktemp("demo")) as client:
        yield client


def _get(app: TestClient, peer: str, **headers: str) -> int:
    return TestClient(app.app, client=(peer, 40000)).get("/metrics", headers=headers).status_code


def test_the_demo_without_a_token_shows_metrics_to_this_machine_only(demo: TestClient) -> None:
    assert _get(demo, "127.0.0.1") == 200 and _get(demo, "::1") == 200
    assert _get(demo, "192.0.2.8") == 401
    assert _get(demo, "127.0.0.1", **{"X-Forwarded-For": "192.0.2.8"}) == 401, \
        "through a proxy on this machine"
    r = TestClient(demo.app, client=("192.0.2.8", 1)).get("/metrics")
    assert "GREENTWIN_METRICS_TOKEN" in r.json()["detail"]


def test_with_a_token_only_its_holder_reads_metrics(tmp_path: Path) -> None:
    with _app(tmp_path, metrics_token=TOKEN) as app:
        assert _get(app, "127.0.0.1") == 401, "a configured token holds on this machine too"
        assert _get(app, "192.0.2.8", Authorization=f"Bearer {TOKEN}x") == 401
        assert _get(app, "192.0.2.8", Authorization=f"Bearer {TOKEN}") == 200


def test_prod_refuses_a_placeholder_metrics_token() -> None:
    keys = {"environment": "prod", "audit_keys": "k" + "0123456789abcdef" * 3,
            "secret_key": "s" + "0123456789abcdef" * 3}
    with pytest.raises(ValueError, match="GREENTWIN_METRICS_TOKEN is a placeholder"):
        Settings(**keys, metrics_token="changeme")
    with pytest.raises(ValueError, match="GREENTWIN_METRICS_TOKEN must be at least 32"):
        Settings(**keys, metrics_token="short-but-not-a-placeholder")
    assert Settings(**keys, metrics_token="").metrics_token is not None, "empty: no token, /metrics closed"
