"""Operator settings through the real app in-process: checked against the safety limits, sealed with who and
why, in force from the very next decision (observation, clip and record), kept over a restart, followed by
another replica's runtime; and a greenhouse registered while the service runs gets decisions.

One service (SQLite, its writer process, no broker) serves the whole module; telemetry enters as the bridge
hands it over (``Runtime.on_telemetry`` on the event loop).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.access_coverage import check_access
from app.access_seal import AccessSealer
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.fleet import build_controllers
from app.greenhouse_settings import SettingsEdit, change_settings
from app.main import create_app
from app.models import Decision
from app.services.greenhouses import add_greenhouse
from app.snapshots import SnapshotStore
from control import ExpertProposer, GreenhouseController, ZoneSetup
from control.setup import GreenhouseSetup
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from twin.spec import ObservationSpec
from wire.topics import Telemetry

SECRET = "settings-api-secret-" + "7c3e9a1f" * 4
PW = "settings api password"
ZONES = 3


@dataclass
class Service:
    client: TestClient
    root: Path

    @property
    def runtime(self) -> Any:
        return self.client.app.state.runtime  # type: ignore[attr-defined]

    def auth(self, user: str) -> dict[str, str]:
        r = self.client.post("/api/auth/login", json={"username": user, "password": PW})
        assert r.status_code == 200, r.text
        self.client.cookies.clear()
        return {"Authorization": f"Bearer {r.json()['access_token']}"}

    def patch(self, gh: str, body: dict[str, Any], user: str = "pia") -> Any:
        return self.client.patch(f"/api/greenhouses/{gh}/settings", json=body, headers=self.auth(user))

    def access_tail(self) -> list[Any]:
        return self.runtime.audit.store.tail_entries("_access", 1)

    def decide(self, gh: str, ts: datetime, **fields: Any) -> Decision:
        """One telemetry message through the runtime; its stored decision (the writer stores it)."""
        z = self.runtime.controllers[gh].z
        tel = Telemetry(**{"ts": ts, "boot_id": "settings", "seq": int(ts.timestamp()),
                           "soil_vwc": [[0.2, 0.2]] * z, "air_temp_c": 21.0, "air_rh_pct": 70.0,
                           "par_umol_m2_s": 200.0, "co2_ppm": 500.0, "leaf_temp_c": 21.0, "flow_l_min": 0.0,
                           "pump_current_a": 0.0, "valve_open": [0] * z, "pump_pct": 0.0, "light_pct": 0.0,
                           "estop": False, **fields})
        self.client.portal.call(self.runtime.on_telemetry, gh, tel)  # type: ignore[union-attr]
        return wait_for(lambda: self._stored(gh, ts), f"the decision of {gh} at {ts}")

    def _stored(self, gh: str, ts: datetime) -> Decision | None:
        with self.runtime.sessions() as s:
            rows = s.scalars(select(Decision).where(Decision.greenhouse_id == gh)).all()
            return next((r for r in rows if r.ts.replace(tzinfo=UTC) == ts and r.actor != "watchdog"), None)


def wait_for(probe: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (got := probe()) is not None and got is not False:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("settings")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=ZONES, soil="loam", name="North house")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for name, roles in {"pia": ["agronomist"], "olga": ["operator"], "adam": ["admin"]}.items():
            create_user(session=session, username=name, password=PW, roles=roles)
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key=SECRET, lease_ttl_s=2.0, lease_renew_s=0.5,
                        settings_poll_s=3600.0,  # polls are called by hand here
                        max_age_s=3600.0, max_clock_skew_s=3600.0)  # telemetry minutes apart, sent at once
    with TestClient(create_app(settings, state_dir=root / "state")) as client:
        yield Service(client, root)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def test_a_patch_is_in_force_from_the_next_decision_and_sealed_with_who_and_why(service: Service) -> None:
    """Zone 2 (index 1) took 10 L; its cap goes from 250 to 5 L and its band up. The decision before keeps
    its valve open; the very next one closes it by the new cap, observes the new band and names the change."""
    rt, gh = service.runtime, "gh1"
    r = service.client.post(f"/api/greenhouses/{gh}/mode", headers=service.auth("olga"),
                            json={"mode": "manual", "reason": "cap test", "manual_action": [1, 1, 1, 40, 0]})
    assert r.status_code == 200, r.text
    t0 = _now()
    before = service.decide(gh, t0, valve_open=[0, 1, 0], flow_l_min=10.0)  # 10 L to zone index 1
    assert before.clipped["valves"] == [1, 1, 1] and before.estimate["settings_version"] == 1

    r = service.patch(gh, {"reason": "zone 2 drains into the path", "zones": [
        {"index": 1, "name": "Path side", "daily_water_cap_l": 5, "target_low_vwc": 0.22,
         "target_high_vwc": 0.3}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["version"] == 2 and body["zones"][1]["water_cap_in_force_l"] == 5.0
    assert body["changed"] == {"zones[1].name": [None, "Path side"], "zones[1].daily_water_cap_l": [250.0, 5],
                               "zones[1].target_low_vwc": [0.195, 0.22],
                               "zones[1].target_high_vwc": [0.27, 0.3]}
    [sealed] = service.access_tail()
    assert (sealed.kind, sealed.actor) == ("greenhouse_settings", "agronomist:pia")
    assert sealed.payload["reason"] == "zone 2 drains into the path"
    assert sealed.payload["settings"]["zones"][1]["daily_water_cap_l"] == 5

    after = service.decide(gh, t0 + timedelta(seconds=60), valve_open=[1, 0, 1])
    assert after.clipped["valves"] == [1, 0, 1]
    [fired] = [f for f in after.rules_fired if f["actuator"] == "valve[1]"]
    assert fired["rule"] == "zone.daily_water_cap" and "cap 5.0 L" in fired["why"]
    ts, obs = rt.dispatch.observations[gh]
    sl = ObservationSpec(ZONES).slices
    assert np.allclose(np.asarray(obs)[sl["target_low"]], [0.195, 0.22, 0.195])
    assert np.allclose(np.asarray(obs)[sl["target_high"]], [0.27, 0.3, 0.27])
    assert after.estimate["settings_version"] == 2
    assert after.estimate["settings_change"] == {"version": 2, "actor": "agronomist:pia",
                                                 "reason": "zone 2 drains into the path",
                                                 "changed": body["changed"]}
    later = service.decide(gh, t0 + timedelta(seconds=120))
    assert later.estimate["settings_version"] == 2 and "settings_change" not in later.estimate

    # A restart builds the controllers from the database: the same settings, the same caps in force.
    [ctl] = build_controllers(rt.sessions, rt.settings, rt.limits,
                              lambda z: ExpertProposer(ThresholdExpert()),
                              SnapshotStore(service.root / "restart")).values()
    assert ctl.setup == rt.controllers[gh].setup
    assert list(ctl.limits.water_cap_per_zone()) == [250.0, 5.0, 250.0]
    assert service.client.post(f"/api/greenhouses/{gh}/mode", headers=service.auth("olga"),
                               json={"mode": "auto", "reason": "cap test done"}).status_code == 200


@pytest.mark.parametrize(("zone", "field"), [
    ({"target_high_vwc": 0.44}, "zones[0].target_high_vwc"),   # loam saturates at 0.45, the margin is 0.03
    ({"target_low_vwc": 0.3, "target_high_vwc": 0.25}, "zones[0].target_low_vwc"),
    ({"target_low_vwc": 0.0}, "zones[0].target_low_vwc"),
    ({"daily_water_cap_l": 300}, "zones[0].daily_water_cap_l"),  # the limits file's hard maximum is 250 L
    ({"soil": "peat"}, "soil"),
    ({"target_low_vwc": "0.2"}, "target_low_vwc"),              # no coercion: a string is not a number
])
def test_a_value_outside_the_limits_is_422_naming_the_field_and_changes_nothing(
        service: Service, zone: dict[str, Any], field: str) -> None:
    version = service.runtime.controllers["gh1"].setup.version
    head = service.access_tail()[0].seq
    r = service.patch("gh1", {"reason": "try a bad value", "zones": [{"index": 0, **zone}]})
    assert r.status_code == 422 and field in json.dumps(r.json()["detail"]), r.text
    assert service.runtime.controllers["gh1"].setup.version == version
    assert service.access_tail()[0].seq == head, "nothing sealed"


def test_nan_lamp_hours_over_the_cap_and_a_missing_reason_are_refused(service: Service) -> None:
    head = service.access_tail()[0].seq
    raw = '{"reason": "nan", "zones": [{"index": 0, "daily_water_cap_l": NaN}]}'
    r = service.client.patch("/api/greenhouses/gh1/settings", content=raw, headers={
        **service.auth("pia"), "Content-Type": "application/json"})
    assert r.status_code == 422 and "daily_water_cap_l" in r.text
    r = service.client.patch("/api/greenhouses/gh1/settings",
                             content='{"reason": "nan", "lamp_hours_per_day": NaN}',
                             headers={**service.auth("pia"), "Content-Type": "application/json"})
    assert r.status_code == 422 and ["body", "lamp_hours_per_day"] in [e["loc"] for e in r.json()["detail"]]
    r = service.patch("gh1", {"reason": "more light", "lamp_hours_per_day": 20})
    assert r.status_code == 422 \
        and r.json()["detail"].startswith("lamp_hours_per_day: 20 h is outside 0-16 h")
    assert service.patch("gh1", {"name": "Renamed"}).status_code == 422  # no reason
    assert service.patch("gh1", {"reason": "no such zone",
                                 "zones": [{"index": 9, "name": "x"}]}).status_code == 422
    assert service.access_tail()[0].seq == head


def test_roles_and_unknown_greenhouses(service: Service) -> None:
    assert service.patch("gh1", {"reason": "not mine", "name": "X"}, user="olga").status_code == 403
    assert service.patch("nope", {"reason": "no such", "name": "X"}, user="adam").status_code == 404
    r = service.client.get("/api/greenhouses/gh1/settings", headers=service.auth("olga"))
    assert r.status_code == 200 and r.json()["lamp_hours_max"] == 16.0


def test_lamps_and_names_are_live_on_the_pages_and_in_the_observation(service: Service) -> None:
    r = service.patch("gh1", {"reason": "the climate computer runs the lamps now", "name": "North glasshouse",
                              "lamps_ours": False, "lamp_hours_per_day": 12,
                              "zones": [{"index": 2, "name": ""}]}, user="adam")
    assert r.status_code == 200, r.text
    assert service.access_tail()[0].actor == "admin:adam"
    ctl = service.runtime.controllers["gh1"]
    assert ctl.limits.lights_daily_hours_cap == 12.0 and not ctl.obs_builder.lamps_ours
    service.decide("gh1", _now() + timedelta(minutes=5))
    _, obs = service.runtime.dispatch.observations["gh1"]
    assert obs[ObservationSpec(ZONES).slices["lamps_ours"]][0] == 0.0
    auth = service.auth("pia")
    live = service.client.get("/api/greenhouses/gh1/live", headers=auth).json()
    assert live["name"] == "North glasshouse"
    assert [z["label"] for z in live["zones"]] == ["Zone 1", "Path side", "Zone 3"]
    assert [z["water_cap_l"] for z in live["zones"]] == [250.0, 5.0, 250.0]
    [row] = [g for g in service.client.get("/api/greenhouses", headers=auth).json() if g["id"] == "gh1"]
    assert row["name"] == "North glasshouse"
    service.client.cookies.set("greentwin_session", auth["Authorization"][7:])
    try:
        page = service.client.get("/greenhouses/gh1").text
    finally:
        service.client.cookies.clear()
    assert ">North glasshouse</a>" in page and "<title>North glasshouse" in page \
        and 'id="settings-form"' in page


def test_another_replicas_change_and_the_audit_coverage(service: Service) -> None:
    """A change made elsewhere (another replica, same database) is taken at the next poll; ``audit verify``'s
    access check holds the rows to the last sealed settings and names a row changed behind the trail's
    back."""
    rt = service.runtime
    sealer = AccessSealer(rt.audit.store, "admin:elsewhere")
    edit = SettingsEdit("set on replica b", zones={0: {"target_high_vwc": 0.28}})
    setup, change = change_settings(rt.sessions, "gh1", edit, rt.limits, "admin:elsewhere",
                                    sealer.sealing("greenhouse_settings"))
    assert change is not None and rt.controllers["gh1"].setup.version == setup.version - 1
    assert rt.settings_watch.check() == ["gh1"]
    assert rt.controllers["gh1"].setup == setup and rt.controllers["gh1"].obs_builder.target_high[0] == 0.28

    engine = rt.sessions.kw["bind"]
    with engine.connect() as conn:
        assert check_access(conn, rt.audit.store).coverage.settings_differ == []
    with engine.begin() as conn:
        conn.execute(text("UPDATE zone SET daily_water_cap_l = 900 WHERE greenhouse_id = 'gh1' "
                          "AND zone_index = 1"))
    try:
        with engine.connect() as conn:
            found = check_access(conn, rt.audit.store).coverage
        assert found.settings_differ == ["gh1: zones[1].daily_water_cap_l sealed 5.0, stored 900.0"]
        assert "greenhouse settings other than sealed" in found.describe()
    finally:
        with engine.begin() as conn:
            conn.execute(text("UPDATE zone SET daily_water_cap_l = 5 WHERE greenhouse_id = 'gh1' "
                              "AND zone_index = 1"))


def test_a_greenhouse_registered_while_running_gets_decisions(service: Service) -> None:
    rt = service.runtime
    r = service.client.post("/api/greenhouses", headers=service.auth("adam"),
                            json={"id": "gh-new", "zones": 2, "soil": "sand", "name": "Annex"})
    assert r.status_code == 201 and r.json()["controlled"] is True, r.text
    wait_for(lambda: rt.dispatch.may_command("gh-new"), "the new greenhouse's lease", timeout=10)
    decision = service.decide("gh-new", _now() + timedelta(minutes=6))
    assert decision.estimate["settings_version"] == 1 and len(decision.clipped["valves"]) == 2
    assert isinstance(rt.controllers["gh-new"], GreenhouseController)
    with rt.sessions.kw["bind"].connect() as conn:  # its registration sealed its settings as they stand
        found = check_access(conn, rt.audit.store).coverage
    assert "gh-new" not in found.unsealed_greenhouses and found.settings_differ == []


def test_lamps_greentwin_does_not_control_are_never_commanded() -> None:
    """The operator's manual 80 % reaches the lamps only while they are greentwin's; staged settings come into
    force between decisions, the estimate carried over a change of soil."""
    zones = (ZoneSetup("loam", 0.195, 0.27, 0.45, 250.0),) * 2
    site = SafetyLimits.default()
    ctl = GreenhouseController("gh1", list(zones), ExpertProposer(ThresholdExpert()), site)
    ctl.apply_setup(GreenhouseSetup("gh1", zones), site)
    noon = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    ctl.set_mode("manual", "operator:olga", "lamp test", noon, np.array([0, 0, 0, 80.0]))

    def light(k: int) -> float:
        tel = Telemetry(ts=noon + timedelta(minutes=k), boot_id="lamps", seq=k + 1, soil_vwc=[[0.2, 0.2]] * 2,
                        air_temp_c=21.0, air_rh_pct=70.0, par_umol_m2_s=200.0, co2_ppm=500.0,
                        leaf_temp_c=21.0, flow_l_min=0.0, pump_current_a=0.0, valve_open=[0, 0], pump_pct=0.0,
                        light_pct=0.0, estop=False)
        return float(ctl.on_telemetry(tel).clipped["light_pct"])

    assert light(1) == 80.0
    sand = (replace(zones[0], soil_type="sand", saturation=0.38, target_low=0.085, target_high=0.12),) * 2
    # Staged while a decision is under way: in force when the next one begins, not before.
    ctl.stage_setup(GreenhouseSetup("gh1", sand, lamps_ours=False, version=2), site)
    ctl.stage_setup(GreenhouseSetup("gh1", zones, version=1), site)  # an older version never replaces it
    assert ctl.setup.version == 1 and ctl.obs_builder.lamps_ours
    assert light(2) == 0.0 and ctl.setup.version == 2 and ctl.estimator.models[0].saturation == 0.38
    theta = ctl.estimator.state_dict()["zones"][0]["theta"]
    ctl.apply_setup(GreenhouseSetup("gh1", zones, lamps_ours=True, lamp_hours_per_day=0.0, version=3), site)
    assert ctl.estimator.state_dict()["zones"][0]["theta"] == theta, \
        "the estimate carries over a change of soil"
    assert light(3) == 0.0 and ctl.limits.lights_daily_hours_cap == 0.0  # a budget of none: the clipper's cap
