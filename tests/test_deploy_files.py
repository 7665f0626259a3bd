"""``deploy/``: structure of the compose file, image and systemd units (and systemd's own check of the
units, where systemd is installed); the owner role kept away from the service in both; the roles SQL
on a real PostgreSQL; the settings table in ``deploy/README.md`` equal to the one generated from the
settings model.

The stack itself runs on real containers in ``tests/deploy/test_compose_stack.py`` (where a Docker
daemon and the images of ``deploy/local-images/build.sh`` are at hand).
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.settings_doc import settings_markdown

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
CONTAINER_UID = "10001"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_settings_table_is_the_generated_one() -> None:
    readme = (DEPLOY / "README.md").read_text()
    found = re.search(r"<!-- settings:begin -->\n(.*?)<!-- settings:end -->", readme, re.S)
    assert found, "deploy/README.md lost its settings markers"
    assert found.group(1) == settings_markdown(), "regenerate with `greentwin settings --markdown`"


def test_compose_services_wait_for_what_they_need(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"db", "mqtt", "init", "migrate", "greentwin", "audit-verify", "audit-purge",
            "retrain"} <= set(services)
    for name in ("db", "mqtt", "greentwin"):
        assert services[name]["healthcheck"]["test"], f"{name} has no health check"
    assert "/readyz" in " ".join(services["greentwin"]["healthcheck"]["test"])
    after = services["greentwin"]["depends_on"]
    assert after["init"]["condition"] == after["migrate"]["condition"] == "service_completed_successfully"
    assert after["db"]["condition"] == after["mqtt"]["condition"] == "service_healthy"
    assert services["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    assert services["init"]["command"][:2] == ["greentwin", "init"]


def test_compose_keys_belong_to_the_container_user(compose: dict[str, Any]) -> None:
    """The jobs that write or read keys run as the image's user, on the same state volume."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"--uid {CONTAINER_UID}" in dockerfile and re.search(r"^USER greentwin$", dockerfile, re.M)
    for name in ("init", "migrate", "greentwin", "audit-verify", "audit-purge", "retrain"):
        service = compose["services"][name]
        assert service["user"].split(":")[0] == CONTAINER_UID, name
        assert "state:/var/lib/greentwin" in service["volumes"], name


def test_compose_secrets_are_declared_files_and_roles_split(compose: dict[str, Any]) -> None:
    declared = compose["secrets"]
    for name, service in compose["services"].items():
        for secret in service.get("secrets", []):
            assert secret in declared, f"{name} uses undeclared secret {secret}"
    assert all(s["file"].startswith("./secrets/") for s in declared.values())
    env = {name: s.get("environment", {}) for name, s in compose["services"].items()}
    assert env["migrate"]["GREENTWIN_DB_ROLE"] == env["audit-purge"]["GREENTWIN_DB_ROLE"] == "greentwin_owner"
    assert env["greentwin"]["GREENTWIN_DB_ROLE"] == env["audit-verify"]["GREENTWIN_DB_ROLE"] \
        == "greentwin_app"
    assert "db_owner_password" not in compose["services"]["greentwin"]["secrets"]
    assert "verify" in " ".join(compose["services"]["audit-verify"]["command"])
    assert "purge" in " ".join(compose["services"]["audit-purge"]["command"])
    assert "db grant --role greentwin_app" in " ".join(compose["services"]["migrate"]["command"])
    assert env["retrain"]["GREENTWIN_DB_ROLE"] == "greentwin_app"  # rows only: the registry, the runs
    assert "greentwin retrain" in " ".join(compose["services"]["retrain"]["command"])
    # shell loops: stopped by an init, not after the grace period
    for name in ("audit-verify", "audit-purge", "retrain"):
        assert compose["services"][name]["command"][:2] == ["sh", "-c"] \
            and compose["services"][name]["init"] is True
    text = (DEPLOY / "compose.yaml").read_text()
    assert not re.search(r"(?i)password\s*[:=]\s*[^/\s{]", text.replace("PASSWORD_FILE", "")), \
        "a literal password"


def test_compose_files_it_mounts_exist(compose: dict[str, Any]) -> None:
    """Every host path the compose file mounts is shipped, except the secrets the operator makes
    before the first start (``./secrets/``: database and broker passwords, broker certificates)."""
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./") and not source.startswith("./secrets/"):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"
    assert "./mosquitto.conf" in " ".join(compose["services"]["mqtt"]["volumes"])


def test_compose_images_default_to_upstream_and_can_be_named() -> None:
    """The images come from variables whose defaults are the registry images (deploy/Dockerfile's
    build for the service); deploy/local-images builds the same software under other names."""
    text = (DEPLOY / "compose.yaml").read_text()
    for variable, default in (("GREENTWIN_IMAGE", "greentwin:latest"),
                              ("GREENTWIN_POSTGRES_IMAGE", "postgres:15"),
                              ("GREENTWIN_MOSQUITTO_IMAGE", "eclipse-mosquitto:2")):
        assert f"image: ${{{variable}:-{default}}}" in text, variable
        assert variable in (DEPLOY / "README.md").read_text(), f"{variable} undocumented"
    assert re.search(r"^FROM python:3\.11-slim$", (DEPLOY / "Dockerfile").read_text(), re.M)
    build = (DEPLOY / "local-images" / "build.sh").read_text()
    assert all(f"{name}:local" in build
               for name in ("greentwin", "greentwin-postgres", "greentwin-mosquitto"))


def test_compose_hands_the_broker_password_to_the_service(compose: dict[str, Any]) -> None:
    """The state's greentwin.env, which the entry point loads, points GREENTWIN_SECRETS_DIR at the
    service's own keys; a compose secret set that way would never be read. The broker password is a
    file the entry point reads instead."""
    service = compose["services"]["greentwin"]
    path = service["environment"]["GREENTWIN_MQTT_PASSWORD_FILE"]
    assert path == "/run/secrets/greentwin_mqtt_password" and "greentwin_mqtt_password" in service["secrets"]
    for name, svc in compose["services"].items():
        assert "GREENTWIN_SECRETS_DIR" not in svc.get("environment", {}), name
    entrypoint = (DEPLOY / "entrypoint.sh").read_text()
    assert 'GREENTWIN_MQTT_PASSWORD=$(cat "$GREENTWIN_MQTT_PASSWORD_FILE")' in entrypoint


def _instructions(path: Path) -> dict[str, list[str]]:
    """A Dockerfile's instructions by keyword (continuation lines joined, comments dropped)."""
    found: dict[str, list[str]] = {}
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                      if not line.lstrip().startswith("#")))
    for line in text.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.setdefault(keyword.upper(), []).append(" ".join(rest.split()))
    return found


def test_local_service_image_is_laid_out_as_the_upstream_one() -> None:
    """The image built from Debian's packages runs as the same user, with the same entry point,
    command, environment, volume and health check as deploy/Dockerfile's, so the compose file and
    the Kubernetes manifests hold for either."""
    upstream = _instructions(DEPLOY / "Dockerfile")
    local = _instructions(DEPLOY / "local-images" / "greentwin.Dockerfile")
    for keyword in ("USER", "ENTRYPOINT", "CMD", "VOLUME", "EXPOSE", "HEALTHCHECK"):
        assert local[keyword] == upstream[keyword], keyword
    assert [e for e in local["ENV"] if "GREENTWIN" in e] == [e for e in upstream["ENV"] if "GREENTWIN" in e]
    user = f"--uid {CONTAINER_UID} --gid {CONTAINER_UID}"
    assert user in " ".join(upstream["RUN"]) and user in " ".join(local["RUN"])


OWNER_SECRET = "db_owner_password"
OWNER_ROLE = "greentwin_owner"
OWNER_JOBS = {"migrate", "audit-purge"}
"""The compose services that act as the database owner: migrations and grants, and the purge."""


def test_compose_hands_the_owner_role_to_its_jobs_only(compose: dict[str, Any]) -> None:
    """Compose mounts a secret only into the services that list it: the owner's password and role
    reach the one-shot migration and the purge, never the service or its other jobs. The check is
    on each service as compose sees it (the shared ``x-greentwin`` block merged in)."""
    services = compose["services"]
    owners = {name for name, svc in services.items() if name != "db"
              and (OWNER_SECRET in svc.get("secrets", []) or OWNER_ROLE in str(svc.get("environment", {})))}
    assert owners == OWNER_JOBS
    service = services["greentwin"]
    assert OWNER_SECRET not in service["secrets"] \
        and "owner" not in str(service.get("environment", {})).lower()
    for env_file in [service["env_file"]] if isinstance(service["env_file"], str) else service["env_file"]:
        assert "OWNER" not in (DEPLOY / env_file).read_text().upper(), env_file
    assert services["migrate"]["restart"] == "no" and "serve" not in " ".join(services["migrate"]["command"])
    assert services["greentwin"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_systemd_timers_start_oneshot_jobs() -> None:
    timers = sorted(DEPLOY.glob("*.timer"))
    assert {t.stem for t in timers} == {"greentwin-audit-verify", "greentwin-audit-purge",
                                        "greentwin-retrain"}
    for timer in timers:
        unit = _unit(timer)
        assert unit["Timer"]["OnCalendar"] and unit["Timer"]["Persistent"] == "true"
        service = _unit(timer.with_suffix(".service"))
        assert service["Service"]["Type"] == "oneshot" and service["Service"]["User"] == "greentwin"
        job = timer.stem.removeprefix("greentwin-").replace("audit-", "audit ")
        assert f"greentwin {job}" in service["Service"]["ExecStart"]
    retrain = _unit(DEPLOY / "greentwin-retrain.service")["Service"]
    assert retrain["SuccessExitStatus"].split() == ["3", "4"]  # refused and locked are not failures
    main = _unit(DEPLOY / "greentwin.service")["Service"]
    assert "serve" in main["ExecStart"] and "ExecStartPre" not in main
    assert main["RestartPreventExitStatus"] == "2"  # a start that cannot proceed is not retried


def _assignments(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of every assignment in a unit file, repeated keys included (systemd
    applies every ``EnvironmentFile=``; configparser would keep only the last)."""
    section, found = "", []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith(("#", ";")) and "=" in line:
            key, value = line.split("=", 1)
            found.append((section, key.strip(), value.strip()))
    return found


def test_systemd_service_never_holds_the_owner_role() -> None:
    """``EnvironmentFile=`` hands a file's variables to every process of its unit, so the owner's
    URL lives in its own units: the migration (before every start of the service, which requires
    it; as a transient user the service's user cannot look into) and the purge."""
    units = {p.name: _assignments(p) for p in sorted(DEPLOY.glob("*.service"))}
    loads_owner = {name for name, kv in units.items()
                   if any(k == "EnvironmentFile" and v.lstrip("-").endswith("/owner.env") for _, k, v in kv)}
    assert loads_owner == {"greentwin-migrate.service", "greentwin-audit-purge.service"}
    for name, kv in units.items():
        if name not in loads_owner:
            assert not [v for _, _, v in kv if "OWNER" in v.upper()], f"{name} refers to the owner"

    service = _unit(DEPLOY / "greentwin.service")
    assert "greentwin-migrate.service" in service["Unit"]["Requires"].split()
    assert "greentwin-migrate.service" in service["Unit"]["After"].split()
    assert service["Service"]["ProtectProc"] == "invisible"
    migrate = _unit(DEPLOY / "greentwin-migrate.service")["Service"]
    # again at every start
    assert migrate["Type"] == "oneshot" and migrate.get("RemainAfterExit", "no") == "no"
    assert migrate["DynamicUser"] == "yes" and "User" not in migrate  # not the service's user
    run = migrate["ExecStart"]
    assert run.index("greentwin db upgrade") < run.index("greentwin db grant --role greentwin_app")
    assert " && " in run and run.count('--url "$GREENTWIN_OWNER_DATABASE_URL"') == 2
    env = (DEPLOY / "greentwin.env").read_text().upper()
    assert "OWNER" not in env, "the service's settings file names the owner"


def test_systemd_accepts_every_unit(tmp_path: Path) -> None:
    """``systemd-analyze verify``: every key known to systemd, every section and value parsed. The
    programs the units run are not installed here, which it reports and this ignores."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    units = sorted(DEPLOY.glob("greentwin*.service")) + sorted(DEPLOY.glob("greentwin*.timer"))
    for unit in units:
        shutil.copy2(unit, tmp_path / unit.name)
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *(f"./{u.name}" for u in units)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    complaints = [line for line in (done.stdout + done.stderr).splitlines()
                  if line.strip() and "is not executable: No such file or directory" not in line]
    assert complaints == [], "\n".join(complaints)


@pytest.mark.postgres
def test_roles_sql_gives_the_service_rows_but_not_the_schema(pg_url: str, tmp_path: Path) -> None:
    """The compose init SQL on the real server (roles and database renamed so runs never collide)."""
    from sqlalchemy import create_engine, make_url, text
    from sqlalchemy.exc import ProgrammingError

    from app.cli import db as db_cli

    if shutil.which("psql") is None:
        pytest.skip("psql not installed")
    tag = uuid.uuid4().hex[:8]
    owner, app, database = f"gt_owner_{tag}", f"gt_app_{tag}", f"gt_roles_{tag}"
    for name in ("db_owner_password", "db_app_password"):
        (tmp_path / name).write_text(uuid.uuid4().hex)
    sql = (DEPLOY / "postgres" / "10-roles.sql").read_text()
    sql = (sql.replace("/run/secrets/", f"{tmp_path}/").replace("greentwin_owner", owner)
           .replace("greentwin_app", app).replace("DATABASE greentwin", f"DATABASE {database}")
           .replace("\\connect greentwin", f"\\connect {database}"))
    (tmp_path / "roles.sql").write_text(sql)
    base = make_url(pg_url)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-q", "-h", base.host or "127.0.0.1", "-p",
                        str(base.port or 5432), "-U", base.username or "postgres", "-d",
                        base.database or "test", "-f", str(tmp_path / "roles.sql")], check=True,
                       capture_output=True, timeout=60)
        as_owner = base.set(drivername="postgresql", username=owner, database=database)
        as_app = base.set(drivername="postgresql", username=app, database=database)
        db_cli.upgrade(as_owner.render_as_string(hide_password=False))
        engine = create_engine(as_app)
        try:
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO greenhouse (id, name, zones) VALUES ('gh1', 'gh1', 1)"))
                assert conn.execute(text("SELECT count(*) FROM greenhouse")).scalar() == 1
            with pytest.raises(ProgrammingError, match="permission denied"), engine.begin() as conn:
                conn.execute(text("CREATE TABLE intruder (i int)"))
            with pytest.raises(ProgrammingError, match="owner|permission denied"), engine.begin() as conn:
                conn.execute(text("ALTER TABLE greenhouse ADD COLUMN x int"))
        finally:
            engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{app}"'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{owner}"'))
        admin.dispose()
