"""The compose stack for real: ``deploy/compose.yaml`` on images built from Debian's packages by
``deploy/local-images/build.sh`` (the registry images are the file's defaults; these are the same
software made where no registry can be reached).

One run: the first-start script (every secret, with the owner and mode the container reading it
needs), ``docker-compose up``, ``/readyz``, telemetry from ``greentwin plant-sim`` on the host
through the broker (an edge box's own credentials, the ACL), decisions stored, acknowledged by the
box and sealed, the nightly retrain and the daily ``audit verify`` run in their scheduler
containers, a restart of the service that loses nothing, and ``docker-compose down -v`` whatever
happened. It prints the image sizes and the time from ``up`` to ready.

Runs where a Docker daemon answers or can be started here (root, ``dockerd`` installed: it is
started at the lowest CPU and I/O priority and stopped afterwards) and the images are built; when
only the service's thin top layer is out of date (the project's code changed) it is rebuilt, which
takes seconds. Otherwise skipped with the reason: build the images once with
``sh deploy/local-images/build.sh``, or set ``GREENTWIN_BUILD_IMAGES=1`` to let this test build
them. By hand: ``pytest -m compose``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

pytestmark = [pytest.mark.compose, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BUILD = DEPLOY / "local-images" / "build.sh"
IMAGES = {
    "GREENTWIN_IMAGE": "greentwin:local",
    "GREENTWIN_POSTGRES_IMAGE": "greentwin-postgres:local",
    "GREENTWIN_MOSQUITTO_IMAGE": "greentwin-mosquitto:local",
}
SERVICE_IMAGE = IMAGES["GREENTWIN_IMAGE"]
SERVICE_UID, MQTT_UID = 10001, 1883
EDGE_BOX = "gh1"
# The nightly retrain at a budget that finishes in well under two minutes on two cores.
RETRAIN_BUDGET = ("--days", "1", "--iterations", "1", "--envs", "8", "--steps", "16", "--scenarios", "1",
                  "--eval-days", "0.25", "--replay-days", "0.25", "--instances", "2")
MIN_DECISIONS = 16  # more than the retrain's window needs (app.retraining.window.MIN_STEPS)
READY_TIMEOUT_S = 300.0
LOW_PRIORITY = ["nice", "-n", "19", *(["ionice", "-c3"] if shutil.which("ionice") else [])]


def _say(request: pytest.FixtureRequest, line: str) -> None:
    """A line on the terminal even while output is captured (the numbers this test records)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(f"compose stack: {line}")
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"compose stack: {line}")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _docker_error() -> str | None:
    """None when a Docker daemon answers, else the client's last line."""
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    return None if done.returncode == 0 and done.stdout.strip() else _last_line(done.stderr or done.stdout)


def _compose_command() -> list[str] | None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Docker daemon: the one running, else ``dockerd`` started here and stopped afterwards."""
    if shutil.which("docker") is None:
        pytest.skip("the docker client is not installed (Debian: apt-get install docker.io docker-compose)")
    error = _docker_error()
    if error is None:
        yield
        return
    dockerd = shutil.which("dockerd", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/local/sbin:/sbin")
    if dockerd is None or os.geteuid() != 0:
        pytest.skip(f"no Docker daemon answers ({error}) and none can be started here "
                    f"({'dockerd is not installed' if dockerd is None else 'not root'})")
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with log.open("wb") as out:
        # At the lowest priority: the containers it starts inherit it.
        proc = subprocess.Popen([*LOW_PRIORITY, dockerd], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while (error := _docker_error()) is not None:
            if proc.poll() is not None or time.monotonic() > deadline:
                reason = _last_line(log.read_text(errors="replace"))
                pytest.skip(
                    f"dockerd could not start here "
                    f"({'exit ' + str(proc.returncode) if proc.poll() is not None else 'no answer in 60 s'}"
                    f"): {reason}")
            time.sleep(1)
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _image_status() -> dict[str, str]:
    done = subprocess.run(["sh", str(BUILD), "--status"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"build.sh --status failed: {_last_line(done.stderr)}", pytrace=False)
    return dict(line.split("\t", 1) for line in done.stdout.strip().splitlines())


@pytest.fixture(scope="module")
def images(docker: None, request: pytest.FixtureRequest) -> dict[str, int]:
    """The stack's images, current: built by build.sh beforehand, or here when only the service's
    top layer is behind (or GREENTWIN_BUILD_IMAGES is set). Their sizes in bytes."""
    status = _image_status()
    behind = {name: state for name, state in status.items() if state != "current"}
    heavy = {name: state for name, state in behind.items() if name != SERVICE_IMAGE}
    if heavy and not os.environ.get("GREENTWIN_BUILD_IMAGES"):
        listed = ", ".join(f"{name} {state}" for name, state in heavy.items())
        pytest.skip(f"images not built ({listed}): build them once with `sh deploy/local-images/build.sh` "
                    "(as root; about 7 min from nothing on two cores), or set GREENTWIN_BUILD_IMAGES=1")
    if behind:
        started = time.monotonic()
        done = subprocess.run([*LOW_PRIORITY, "sh", str(BUILD)], capture_output=True, text=True, timeout=3300)
        if done.returncode != 0:
            pytest.fail(f"build.sh failed: {_last_line(done.stderr)}", pytrace=False)
        _say(request, f"built {', '.join(behind)} in {time.monotonic() - started:.0f} s")
        status = _image_status()
        assert all(state == "current" for state in status.values()), status
    sizes = {}
    for name in status:
        out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", name], capture_output=True,
                             text=True, check=True).stdout
        sizes[name] = int(out)
    _say(request, "image sizes: " + ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in sizes.items()))
    return sizes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stack:
    """``docker-compose`` on a copy of deploy/ (its own secrets, project name and host ports)."""

    def __init__(self, workdir: Path, compose: list[str]) -> None:
        self.deploy = workdir / "deploy"
        shutil.copytree(DEPLOY, self.deploy, ignore=shutil.ignore_patterns("secrets", "__pycache__"))
        self.api_port, self.mqtt_port, self.mqtts_port = _free_port(), _free_port(), _free_port()
        self.env = {**os.environ, **IMAGES, "COMPOSE": " ".join(compose),
                    "COMPOSE_PROJECT_NAME": f"gtstack{uuid.uuid4().hex[:8]}",
                    "GREENTWIN_API_PORT": str(self.api_port), "GREENTWIN_MQTT_PORT": str(self.mqtt_port),
                    "GREENTWIN_MQTTS_PORT": str(self.mqtts_port)}
        self.compose = [*compose, "-f", str(self.deploy / "compose.yaml")]
        self.secrets = self.deploy / "secrets"

    def run(self, args: Sequence[str], *, timeout: float = 300, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(args), cwd=self.deploy, env=self.env, capture_output=True, text=True,
                              timeout=timeout, input=input)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args[:6])} exited {done.returncode}: "
                                 f"{(done.stdout + done.stderr).strip()[-3000:]}")
        return done

    def dc(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([*self.compose, *args], timeout=timeout, check=check)

    def greentwin(self, service: str, *args: str, timeout: float = 300,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
        """A ``greentwin`` command in a running container, with the settings its entry point loads."""
        return self.dc("exec", "-T", service, "greentwin-entrypoint", "greentwin", *args, timeout=timeout,
                       check=check)

    def state(self, service: str) -> str:
        """``STATUS EXITCODE`` of the service's container (``exited 0``, ``running 0``)."""
        ids = self.dc("ps", "-a", "-q", service).stdout.split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return self.run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}",
                         ids[0]]).stdout.strip()

    def sql(self, query: str) -> list[list[str]]:
        out = self.dc("exec", "-T", "db", "psql", "-U", "postgres", "-d", "greentwin", "-tA", "-F", "\t",
                      "-c", query).stdout
        return [line.split("\t") for line in out.strip().splitlines()]

    def readyz(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/readyz", timeout=3) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def wait_ready(self, since: float) -> float:
        """Seconds from ``since`` (a monotonic time) until /readyz answers 200."""
        while self.readyz() != 200:
            if time.monotonic() - since > READY_TIMEOUT_S:
                ps = self.dc("ps", check=False).stdout
                logs = self.dc("logs", "--tail", "30", "greentwin", check=False).stdout
                raise AssertionError(f"/readyz not 200 after {READY_TIMEOUT_S:.0f} s\n{ps}\n{logs}")
            time.sleep(1)
        return time.monotonic() - since

    def mqtt_passwd(self, user: str, password: str) -> None:
        """An edge box's password line, as deploy/README.md adds one (the broker's own tool and user)."""
        done = subprocess.run(
            ["docker", "run", "--rm", "--user", "0", "--entrypoint", "sh", "-v", f"{self.secrets}:/secrets",
             "-e", "BOX_USER", "-e", "BOX_PASSWORD", IMAGES["GREENTWIN_MOSQUITTO_IMAGE"], "-c",
             'mosquitto_passwd -b /secrets/mosquitto_passwd "$BOX_USER" "$BOX_PASSWORD" '
             f"&& chown {MQTT_UID}:{MQTT_UID} /secrets/mosquitto_passwd "
             "&& chmod 0640 /secrets/mosquitto_passwd"],
            env={**self.env, "BOX_USER": user, "BOX_PASSWORD": password}, capture_output=True, text=True,
            timeout=120)
        assert done.returncode == 0, f"mosquitto_passwd: {_last_line(done.stderr)}"


@pytest.fixture
def stack(images: dict[str, int], tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    compose = _compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed "
                    "(Debian: apt-get install docker-compose)")
    stack = Stack(tmp_path, compose)
    try:
        yield stack
    finally:
        started = time.monotonic()
        stack.dc("down", "-v", "--remove-orphans", "-t", "30", timeout=300, check=False)
        _say(request, f"docker-compose down -v {time.monotonic() - started:.1f} s")


def _mode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_uid, stat.S_IMODE(st.st_mode)


def _connack_code(port: int) -> int:
    """The return code of the broker's CONNACK to an MQTT 3.1.1 CONNECT without credentials."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(5)
        sock.sendall(b"\x10\x14\x00\x04MQTT\x04\x02\x00\x0a\x00\x08gt-anon1")
        reply = sock.recv(4)
    assert len(reply) == 4 and reply[0] == 0x20, f"no CONNACK: {reply!r}"
    return reply[3]


@contextlib.contextmanager
def _plant_sim(stack: Stack, password: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``greentwin plant-sim`` on the host, as edge box gh1 with its own credentials, real-time
    timestamps (the service refuses telemetry from the future), a step every second."""
    url = f"mqtt://{EDGE_BOX}:{password}@127.0.0.1:{stack.mqtt_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENTWIN_")}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "plant-sim", "--greenhouses", EDGE_BOX,
                                 "--zones", "6", "--speed", "1", "--dt-s", "1", "--mqtt-url", url],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _decisions(stack: Stack) -> tuple[int, int, int]:
    """gh1's decisions: how many, the highest id, how many the edge box acknowledged as applied."""
    [[count, top, applied]] = stack.sql(
        "SELECT count(*), coalesce(max(id), 0), count(*) FILTER (WHERE ack_status = 'applied') "
        f"FROM decision WHERE greenhouse_id = '{EDGE_BOX}'")
    return int(count), int(top), int(applied)


def _wait_decisions(stack: Stack, sim: subprocess.Popen[bytes], log: Path, at_least: int,
                    timeout: float = 240) -> tuple[int, int, int]:
    deadline = time.monotonic() + timeout
    while (seen := _decisions(stack))[0] < at_least or seen[2] == 0:
        assert sim.poll() is None, \
            f"plant-sim exited {sim.returncode}: {_last_line(log.read_text(errors='replace'))}"
        if time.monotonic() > deadline:
            logs = stack.dc("logs", "--tail", "20", "greentwin", check=False).stdout
            raise AssertionError(f"{seen[0]} decisions ({seen[2]} applied) after {timeout:.0f} s; wanted "
                                 f"{at_least}\nplant-sim: {_last_line(log.read_text(errors='replace'))}\n"
                                 f"{logs}")
        time.sleep(2)
    return seen


def _verified(output: str) -> int:
    """Records ``audit verify`` verified in gh1's chain (it prints ``ok   gh1: N records verified``)."""
    for line in output.splitlines():
        words = line.split()
        if words[:2] == ["ok", f"{EDGE_BOX}:"]:
            return int(words[2])
    raise AssertionError(f"audit verify did not verify {EDGE_BOX}:\n{output}")


def test_compose_stack_end_to_end(stack: Stack, images: dict[str, int], request: pytest.FixtureRequest,
                                  tmp_path: Path) -> None:
    started = time.monotonic()
    # 1. First start: every secret, each with the owner and mode its reader needs.
    stack.run(["sh", str(stack.deploy / "first-start.sh")], timeout=600)
    _say(request, f"first-start.sh {time.monotonic() - started:.1f} s")
    assert _mode(stack.secrets)[1] == 0o700
    for name in ("db_superuser_password", "db_owner_password", "db_app_password", "greentwin_mqtt_password"):
        assert _mode(stack.secrets / name)[1] == 0o644, name  # read by uid 999 / 10001 inside a 0700 folder
    assert _mode(stack.secrets / "mosquitto_passwd") == (MQTT_UID, 0o640)
    assert _mode(stack.secrets / "mqtt-certs" / "broker.key") == (MQTT_UID, 0o600)
    assert _mode(stack.secrets / "ca")[1] == 0o700
    listing = stack.dc("run", "--rm", "--no-deps", "--entrypoint", "find", "init", "/var/lib/greentwin/state",
                       "-printf", "%U %m %y %P\\n").stdout.split("\n")
    entries = [line.split(" ", 3) for line in listing if line.strip()]
    assert len(entries) > 5, listing
    for uid, mode, kind, path in entries:
        assert int(uid) == SERVICE_UID, f"state/{path} belongs to uid {uid}"
        assert int(mode, 8) & 0o077 == 0, f"state/{path} has mode {mode}: readable by others"
        assert kind in "fd", path
    assert any(path.endswith("greentwin.env") for *_, path in entries)

    # 2. An edge box's own credentials; then the stack, timed from `up` to /readyz.
    box_password = uuid.uuid4().hex
    stack.mqtt_passwd(EDGE_BOX, box_password)
    up = time.monotonic()
    stack.dc("up", "-d", "--no-build", timeout=READY_TIMEOUT_S)
    ready_s = stack.wait_ready(up)
    _say(request, f"docker-compose up to /readyz 200: {ready_s:.1f} s")
    for job in ("init", "migrate"):  # ran to completion before the service started
        assert stack.state(job) == "exited 0", f"{job}: {stack.state(job)}"
    for service in ("db", "mqtt", "greentwin", "audit-verify", "audit-purge", "retrain"):
        assert stack.state(service) == "running 0", f"{service}: {stack.state(service)}"
    assert _connack_code(stack.mqtt_port) == 5, "the broker let an anonymous client in"

    # The owner role stays out of the service: neither the owner's password nor its URL is in there.
    seen = stack.dc("exec", "-T", "greentwin", "sh", "-c",
                    "ls /run/secrets; tr '\\0' '\\n' < /proc/1/environ").stdout
    assert "db_app_password" in seen and "postgresql://greentwin_app:" in seen, seen
    assert "db_owner_password" not in seen and "greentwin_owner" not in seen, \
        "the service holds the owner's secret"

    # 3. The greenhouse, registered through the service's own image; its loop starts at the next start.
    stack.greentwin("greentwin", "greenhouse", "add", EDGE_BOX, "--zones", "6", "--soil", "loam")
    restart = time.monotonic()
    stack.dc("restart", "greentwin")
    stack.wait_ready(restart)

    # 4. Telemetry from the host through the broker: decisions stored, commands applied by the box.
    sim_log = tmp_path / "plant-sim.log"
    with _plant_sim(stack, box_password, sim_log) as sim:
        count, top, applied = _wait_decisions(stack, sim, sim_log, MIN_DECISIONS)
        _say(request, f"{count} decisions stored, {applied} applied by the edge box")

        # 5. The daily audit verify, in the scheduler's container: every stored decision sealed.
        first_pass = stack.dc("logs", "--no-color", "audit-verify").stdout
        assert "FAILED" not in first_pass, first_pass
        verify = stack.greentwin("audit-verify", "audit", "verify", timeout=180)
        assert _verified(verify.stdout) >= count, verify.stdout

        # 6. The nightly retrain, in the retrain scheduler's container (its directory, its role).
        retrain_started = time.monotonic()
        retrain = stack.greentwin("retrain", "retrain", *RETRAIN_BUDGET, timeout=600, check=False)
        retrain_s = time.monotonic() - retrain_started
        assert retrain.returncode in (0, 3), \
            f"retrain exit {retrain.returncode}: {_last_line(retrain.stderr)}"
        runs = stack.sql("SELECT status FROM retrain_run")
        assert runs and runs[-1][0] == ("promoted" if retrain.returncode == 0 else "refused"), runs
        _say(request, f"retrain exit {retrain.returncode} ({runs[-1][0]}) in {retrain_s:.0f} s")

        # 7. A restart of the service loses nothing, and decisions go on after it.
        before = _decisions(stack)
        restart = time.monotonic()
        stack.dc("restart", "greentwin")
        restart_s = stack.wait_ready(restart)
        [[kept]] = stack.sql(f"SELECT count(*) FROM decision WHERE greenhouse_id = '{EDGE_BOX}' "
                             f"AND id <= {before[1]}")
        assert int(kept) == before[0], f"{before[0]} decisions before the restart, {kept} of them after"
        after = _wait_decisions(stack, sim, sim_log, before[0] + 4)
        assert after[1] > before[1]
        _say(request, f"restart to ready {restart_s:.1f} s; {before[0]} decisions kept, {after[0]} after")

    verify = stack.greentwin("audit-verify", "audit", "verify", timeout=180)
    assert _verified(verify.stdout) >= after[0], verify.stdout
    _say(request, f"whole run (first start to verified restart) {time.monotonic() - started:.0f} s")
