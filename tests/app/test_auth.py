"""Auth building blocks: Argon2id hashes, signed expiring tokens, the failed-login window, accounts,
`greentwin user`."""

from __future__ import annotations

import io
import os
import shutil
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.access_seal import SealChange
from app.auth import passwords
from app.auth import users as accounts
from app.auth.ratelimit import SlidingWindowLimiter
from app.auth.service import AuthConfigError, service_secret_key
from app.auth.throttle import LoginThrottle
from app.auth.tokens import TokenError, TokenExpired, TokenSigner
from app.auth.users import UnknownUser, UserExists, create_user, disable_user, list_users, validate_username
from app.cli import db as db_cli
from app.cli import main as cli_main
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.models import Greenhouse, User

PW = "correct horse battery"


class FakeClock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database per module; each test gets a copy (migrating costs more than the tests)."""
    path = tmp_path_factory.mktemp("auth") / "template.sqlite3"
    db_cli.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def db_url(migrated: Path, tmp_path: Path) -> str:
    shutil.copyfile(migrated, tmp_path / "users.sqlite3")
    return f"sqlite:///{tmp_path / 'users.sqlite3'}"


@pytest.fixture
def session(db_url: str):  # type: ignore[no-untyped-def]
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        yield s
    engine.dispose()


# -- passwords ------------------------------------------------------------------------------------


def test_hashes_are_salted_argon2id_and_verify_only_the_right_password() -> None:
    a, b = passwords.hash_password(PW), passwords.hash_password(PW)
    assert a != b and a.startswith("$argon2id$") and PW not in a
    assert passwords.verify_password(a, PW) and passwords.verify_password(b, PW)
    assert not passwords.verify_password(a, PW + "!")
    assert not passwords.verify_password("not a hash", PW)
    assert not passwords.verify_password(a, "x" * (passwords.MAX_PASSWORD_LEN + 1))
    assert not passwords.needs_rehash(a) and passwords.needs_rehash("not a hash")


@pytest.mark.parametrize("bad, match", [("short", "at least"), (" padded password ", "whitespace"),
                                        ("x" * (passwords.MAX_PASSWORD_LEN + 1), "at most")])
def test_password_policy(bad: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        passwords.hash_password(bad)
    assert bad not in str(info.value)


def test_generated_passwords_differ_and_pass_the_policy() -> None:
    generated = {passwords.generate_password() for _ in range(20)}
    assert len(generated) == 20
    for p in generated:
        passwords.check_password_policy(p)


# -- tokens ---------------------------------------------------------------------------------------


def test_token_round_trip_expiry_and_tampering() -> None:
    clock = FakeClock()
    signer = TokenSigner("s" * 40, ttl_s=60, clock=clock)
    token, claims = signer.issue(user_id=7, username="olga", epoch=3)
    assert signer.verify(token) == claims \
        and (claims.user_id, claims.username, claims.epoch) == (7, "olga", 3)
    clock.t += 59
    assert signer.verify(token).username == "olga"
    clock.t += 1
    with pytest.raises(TokenExpired):
        signer.verify(token)
    clock.t -= 30
    head, sig = token.rsplit(".", 1)
    for bad in (token[:-2] + ("AA" if token[-2:] != "AA" else "BB"), head + ".", "garbage", ""):
        with pytest.raises(TokenError, match="invalid token"):
            signer.verify(bad)
    with pytest.raises(TokenError, match="invalid token"):
        TokenSigner("another secret " * 3, ttl_s=60, clock=clock).verify(token)


# -- failed-login window --------------------------------------------------------------------------


def test_sliding_window_blocks_after_max_failures_and_slides_open() -> None:
    clock = FakeClock()
    limiter = SlidingWindowLimiter(3, 100.0, clock=clock)
    key = ("olga", "10.0.0.1")
    for dt in (0, 10, 20):
        clock.t += dt
        assert limiter.attempt(key) == 0.0
    assert limiter.attempt(key) == pytest.approx(70.0)  # first failure at +0 leaves the window at +100
    assert limiter.attempt(("olga", "10.0.0.2")) == 0.0  # another address is another key
    clock.t += 70  # the first failure slid out: one more try
    assert limiter.attempt(key) == 0.0
    assert limiter.attempt(key) > 0
    limiter.reset(key)  # a success clears the key
    assert limiter.attempt(key) == 0.0


def test_a_tighter_limit_forgiving_and_recording() -> None:
    clock = FakeClock()
    limiter = SlidingWindowLimiter(3, 100.0, clock=clock)
    assert limiter.attempt("a") == 0.0
    clock.t += 10
    assert limiter.attempt("a", limit=1) == pytest.approx(90.0), "held until its one failure slides out"
    assert limiter.attempt("a") == 0.0 and limiter.count("a") == 2
    limiter.forgive("a")  # the newest attempt succeeded: the older failure stays
    assert limiter.count("a") == 1
    assert [limiter.record("b") for _ in range(5)] == [1, 2, 3, 3, 3], \
        "recording never refuses, the window caps"


def test_login_throttle_locks_out_failed_addresses_only() -> None:
    clock = FakeClock()
    throttle = LoginThrottle(per_pair=3, per_address=5, per_account=4, window_s=100.0, clock=clock)
    for address in ("10.0.0.1", "10.0.0.2"):
        for _ in range(2):
            assert throttle.admit("olga", address, locked=False).wait_s == 0.0
            reached = throttle.failed("olga")
    assert reached and throttle.addresses_failing("olga") == 2
    refused = throttle.admit("olga", "10.0.0.1", locked=True)
    assert refused.wait_s > 0 and refused.locked_out
    assert throttle.admit("olga", "10.0.0.3", locked=True).wait_s == 0.0, "a clean address gets its try"
    throttle.succeeded("olga", "10.0.0.3")
    assert throttle.admit("olga", "10.0.0.3", locked=True).wait_s == 0.0, "and after a success, again"
    throttle.lift("olga")
    assert throttle.addresses_failing("olga") == 0 and not throttle.failed("olga")
    assert throttle.admit("olga", "10.0.0.1", locked=False).wait_s == 0.0


def test_login_throttle_counts_one_address_over_every_name() -> None:
    throttle = LoginThrottle(per_pair=3, per_address=4, per_account=50, window_s=100.0, clock=FakeClock())
    for i in range(4):
        assert throttle.admit(f"name{i}", "10.0.0.9", locked=False).wait_s == 0.0
    assert throttle.admit("olga", "10.0.0.9", locked=False).wait_s > 0
    assert throttle.admit("olga", "10.0.0.8", locked=False).wait_s == 0.0
    throttle.succeeded("olga", "10.0.0.8")  # a success takes back its own attempt only
    assert throttle.addresses.count("10.0.0.8") == 0 and throttle.addresses.count("10.0.0.9") == 4


def test_sliding_window_memory_is_bounded() -> None:
    clock = FakeClock()
    limiter = SlidingWindowLimiter(2, 100.0, clock=clock, max_keys=3)
    for i in range(10):
        clock.t += 1
        limiter.attempt(f"k{i}")
    assert len(limiter._failures) == 3 and {"k7", "k8", "k9"} == set(limiter._failures)


# -- accounts -------------------------------------------------------------------------------------


def test_create_list_disable_users(session: Session) -> None:
    user = create_user(session=session, username=" Olga ", password=PW,
                       roles=["operator", "agronomist", "operator"])
    assert user.username == "olga" and user.roles == {"operator", "agronomist"} and user.disabled_at is None
    with pytest.raises(UserExists):
        create_user(session=session, username="OLGA", password=PW, roles=["admin"])
    create_user(session=session, username="adam", password=PW, roles=["admin"])
    assert [u.username for u in list_users(session=session)] == ["adam", "olga"]
    epoch = user.token_epoch
    disabled = disable_user(session=session, username="olga")
    assert disabled.disabled_at is not None and disabled.token_epoch == epoch + 1
    with pytest.raises(UnknownUser):
        disable_user(session=session, username="nobody")
    stored = session.scalars(select(User).where(User.username == "olga")).one()
    assert passwords.verify_password(stored.password_hash, PW)


def test_no_change_leaves_the_accounts_without_an_enabled_admin(session: Session) -> None:
    """Without one, nobody can manage accounts through the API any more: recovery would need the host."""
    create_user(session=session, username="adam", password=PW, roles=["admin"])
    create_user(session=session, username="olga", password=PW, roles=["operator"])
    for change in (lambda: accounts.set_roles(session=session, username="adam", roles=["operator"]),
                   lambda: disable_user(session=session, username="adam")):
        with pytest.raises(accounts.LastAdmin, match="'adam' is the last enabled admin"):
            change()
    session.expire_all()
    adam = session.scalars(select(User).where(User.username == "adam")).one()
    assert adam.roles == {"admin"} and adam.disabled_at is None, "a refused change changed nothing"
    adam, _ = accounts.set_roles(session=session, username="adam", roles=["admin", "operator"])
    assert adam.roles == {"admin", "operator"}, "keeping the role is no stepping down"
    accounts.set_roles(session=session, username="olga", roles=["admin"])
    disable_user(session=session, username="olga")
    with pytest.raises(accounts.LastAdmin):  # a disabled admin is no admin
        accounts.set_roles(session=session, username="adam", roles=["operator"])
    accounts.set_roles(session=session, username="olga", roles=["operator"])  # a disabled admin: nobody less
    create_user(session=session, username="ada", password=PW, roles=["admin"])
    assert accounts.set_roles(session=session, username="adam", roles=["operator"])[0].roles == {"operator"}
    with pytest.raises(accounts.LastAdmin, match="'ada'"):
        disable_user(session=session, username="ada")


@pytest.mark.postgres
def test_two_admins_stepping_down_at_once_leave_one_of_them(pg_url: str) -> None:
    """The check holds the admins' rows until the change commits: the second one waits, then sees the first
    change and is refused (checked before the first committed, both would pass)."""
    from tests.conftest import temporary_pg_database

    with temporary_pg_database(pg_url, "greentwin_admins") as url:
        db_cli.upgrade(url)
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        try:
            with sessions() as s:
                for name in ("adam", "ada"):
                    create_user(session=s, username=name, password=PW, roles=["admin"])
            sealing, release = threading.Event(), threading.Event()
            outcome: dict[str, str] = {}

            # a slow audit write, mid-transaction
            def slow_seal(_session: Session, _payload: dict[str, Any]) -> None:
                sealing.set()
                release.wait(10)

            def step_down(name: str, seal: SealChange | None) -> None:
                with sessions() as s:
                    try:
                        accounts.set_roles(session=s, username=name, roles=["operator"], seal=seal)
                        outcome[name] = "changed"
                    except accounts.LastAdmin:
                        outcome[name] = "refused"

            first = threading.Thread(target=step_down, args=("adam", slow_seal))
            first.start()
            assert sealing.wait(10), "adam's change is made and being sealed"
            second = threading.Thread(target=step_down, args=("ada", None))
            second.start()
            second.join(0.5)
            assert second.is_alive(), "ada's check waits for adam's transaction"
            release.set()
            first.join(10)
            second.join(10)
            assert outcome == {"adam": "changed", "ada": "refused"}
            with sessions() as s:
                assert {u.username: sorted(u.roles) for u in list_users(session=s)} == {
                    "ada": ["admin"], "adam": ["operator"]}
        finally:
            release.set()
            engine.dispose()


@pytest.mark.parametrize("name, roles, match", [("bad name", ["operator"], "invalid username"),
                                                ("x" * 49, ["operator"], "invalid username"),
                                                ("olga", [], "at least one role"),
                                                ("olga", ["root"], "unknown role")])
def test_account_input_is_validated(session: Session, name: str, roles: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        create_user(session=session, username=name, password=PW, roles=roles)
    assert list_users(session=session) == []


def test_username_fits_the_actor_columns() -> None:
    assert len("operator:" + validate_username("a" * 48)) <= 64


# -- the signing secret ---------------------------------------------------------------------------


def test_secret_key_required_outside_demo_and_kept_by_the_demo(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match="GREENTWIN_SECRET_KEY"):
        service_secret_key(Settings(environment="dev"), tmp_path)
    assert service_secret_key(Settings(environment="dev", secret_key="configured"), tmp_path) == "configured"
    first = service_secret_key(Settings(environment="demo"), tmp_path)
    assert len(first) >= 32 and service_secret_key(Settings(environment="demo"), tmp_path) == first
    assert stat.S_IMODE(os.stat(tmp_path / "api-secret-key").st_mode) == 0o600


# -- `greentwin user` -----------------------------------------------------------------------------


def test_user_cli_add_list_disable(db_url: str, session: Session, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "demo")  # audit keys of its own, in --state-dir
    state = str(tmp_path / "state")
    assert cli_main(["user", "add", "olga", "--role", "operator", "--role", "agronomist", "--url", db_url,
                     "--state-dir", state]) == 0
    out = capsys.readouterr().out
    generated = out.split("password: ")[1].split()[0]
    assert "added user olga (agronomist, operator)" in out
    stored = session.scalars(select(User).where(User.username == "olga")).one()
    assert passwords.verify_password(stored.password_hash, generated)

    monkeypatch.setattr("sys.stdin", io.StringIO(PW + "\n"))
    assert cli_main(["user", "add", "anna", "--role", "agronomist", "--password-stdin", "--url", db_url,
                     "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert "password" not in out and PW not in out
    session.expire_all()
    stored = session.scalars(select(User).where(User.username == "anna")).one()
    assert passwords.verify_password(stored.password_hash, PW)

    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert cli_main(["user", "add", "bob", "--role", "admin", "--password-stdin", "--url", db_url,
                     "--state-dir", state]) == 2
    assert "at least 12" in capsys.readouterr().err
    assert cli_main(["user", "add", "olga", "--role", "admin", "--url", db_url, "--state-dir", state]) == 2
    assert "already exists" in capsys.readouterr().err

    assert cli_main(["user", "disable", "olga", "--url", db_url, "--state-dir", state]) == 0
    assert cli_main(["user", "disable", "nobody", "--url", db_url, "--state-dir", state]) == 2
    capsys.readouterr()
    assert cli_main(["user", "list", "--url", db_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [["anna", "agronomist", "active"],
                                                    ["olga", "agronomist,operator", "disabled"]]
    # Each change that happened is sealed (the refused ones are not), with the OS user as actor.
    from app.audit_sink import ACCESS_CHAIN, service_audit_keys
    from audit.store import AuditStore

    store = AuditStore(make_engine(db_url), *service_audit_keys(Settings(environment="demo"), Path(state)))
    entries = store.tail_entries(ACCESS_CHAIN, 10)
    assert [(e.kind, e.payload["username"]) for e in entries] == [
        ("user_added", "olga"), ("user_added", "anna"), ("user_disabled", "olga")]
    assert entries[0].payload["roles"] == ["agronomist", "operator"] and entries[0].actor.startswith("cli:")
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))


def test_user_cli_unlock_lifts_a_lock_sealed(db_url: str, session: Session,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "demo")
    state = str(tmp_path / "state")
    user = create_user(session=session, username="olga", password=PW, roles=["operator"])
    until = datetime.now(UTC) + timedelta(minutes=10)
    user.locked_until = until  # as the login path locks it
    session.commit()
    assert cli_main(["user", "unlock", "olga", "--url", db_url, "--state-dir", state]) == 0
    assert "lifted the login lock on olga" in capsys.readouterr().out
    session.expire_all()
    assert session.scalars(select(User).where(User.username == "olga")).one().locked_until is None
    assert cli_main(["user", "unlock", "olga", "--url", db_url, "--state-dir", state]) == 2
    assert "is not locked" in capsys.readouterr().err
    assert cli_main(["user", "unlock", "nobody", "--url", db_url, "--state-dir", state]) == 2
    from app.audit_sink import ACCESS_CHAIN, service_audit_keys
    from audit.store import AuditStore

    store = AuditStore(make_engine(db_url), *service_audit_keys(Settings(environment="demo"), Path(state)))
    [entry] = store.tail_entries(ACCESS_CHAIN, 10)
    assert (entry.kind, entry.payload["username"]) == ("user_unlocked", "olga") \
        and entry.actor.startswith("cli:")
    assert datetime.fromisoformat(entry.payload["locked_until"]) == until
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))


def test_role_changes_and_registrations_from_the_cli_are_sealed(
        db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "demo")
    state = str(tmp_path / "state")
    assert cli_main(["user", "add", "olga", "--role", "operator", "--url", db_url, "--state-dir", state]) == 0
    assert cli_main(["user", "roles", "olga", "--role", "admin", "--role", "agronomist", "--url", db_url,
                     "--state-dir", state]) == 0
    assert "roles operator -> admin, agronomist" in capsys.readouterr().out
    assert cli_main(["user", "roles", "nobody", "--role", "admin", "--url", db_url,
                     "--state-dir", state]) == 2
    capsys.readouterr()
    for refused in (["user", "roles", "olga", "--role", "operator"], ["user", "disable", "olga"]):
        assert cli_main([*refused, "--url", db_url, "--state-dir", state]) == 2, refused
        assert "'olga' is the last enabled admin" in capsys.readouterr().err
    assert cli_main(["greenhouse", "add", "gh-cli", "--zones", "2", "--url", db_url,
                     "--state-dir", state]) == 0
    assert cli_main(["greenhouse", "add", "gh-cli", "--url", db_url, "--state-dir", state]) == 2
    assert "already exists" in capsys.readouterr().err
    from app.audit_sink import ACCESS_CHAIN, service_audit_keys
    from audit.store import AuditStore

    store = AuditStore(make_engine(db_url), *service_audit_keys(Settings(environment="demo"), Path(state)))
    entries = store.tail_entries(ACCESS_CHAIN, 10)
    assert [e.kind for e in entries] == ["user_added", "user_roles", "greenhouse_register"]
    assert all(e.actor.startswith("cli:") for e in entries)
    assert entries[1].payload == {"username": "olga", "from_roles": ["operator"],
                                  "to_roles": ["admin", "agronomist"]}
    assert entries[2].payload["greenhouse_id"] == "gh-cli" and entries[2].payload["zones"] == 2


def test_a_cli_change_the_trail_refuses_is_not_made(db_url: str, session: Session,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The change and its record are one transaction: the audit table refusing the record (here a trigger,
    as a full disk would) rolls the change back, and the command says so (exit 1, no traceback)."""
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "demo")
    state = str(tmp_path / "state")
    assert cli_main(["user", "add", "olga", "--role", "operator", "--url", db_url, "--state-dir", state]) == 0
    capsys.readouterr()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TRIGGER refuse BEFORE INSERT ON audit_record BEGIN "
                          "SELECT RAISE(ABORT, 'audit disk full'); END"))
    for args in (["user", "roles", "olga", "--role", "admin"], ["user", "disable", "olga"],
                 ["user", "add", "eve", "--role", "admin"], ["greenhouse", "add", "gh-unsealed"]):
        assert cli_main([*args, "--url", db_url, "--state-dir", state]) == 1, args
        err = capsys.readouterr().err
        assert "audit trail refused" in err and "audit disk full" in err and "nothing was changed" in err, err
    session.expire_all()
    olga = session.scalars(select(User).where(User.username == "olga")).one()
    assert sorted(olga.roles) == ["operator"] and olga.disabled_at is None
    assert [u.username for u in session.scalars(select(User))] == ["olga"]
    assert session.get(Greenhouse, "gh-unsealed") is None
    engine.dispose()


def test_the_demo_accounts_and_their_new_passwords_are_sealed(db_url: str, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from app.audit_sink import ACCESS_CHAIN
    from app.cli.service import demo_logins
    from app.cli.user import AccessTrail

    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "demo")
    trail = AccessTrail(db_url, str(tmp_path / "state"))
    try:
        # a second start resets passwords
        first, second = demo_logins(db_url, trail), demo_logins(db_url, trail)
        entries = trail.store.tail_entries(ACCESS_CHAIN, 10)
    finally:
        trail.close()
    assert sorted(first) == sorted(second) == ["admin", "agronomist", "operator"] and first != second
    assert [(e.kind, e.payload["username"]) for e in entries] == [
        *(("user_added", name) for name in first), *(("password_reset", name) for name in second)]


def test_greenhouse_cli_registers_nothing_it_cannot_record(db_url: str, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    for name in ("GREENTWIN_AUDIT_KEYS", "GREENTWIN_AUDIT_KEY", "GREENTWIN_AUDIT_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "dev")
    assert cli_main(["greenhouse", "add", "gh-nokeys", "--url", db_url, "--state-dir", str(tmp_path)]) == 2
    assert "audit keys are not configured" in capsys.readouterr().err
    engine = make_engine(db_url)
    with Session(engine) as s:
        assert s.get(Greenhouse, "gh-nokeys") is None
    engine.dispose()


def test_user_cli_changes_nothing_it_cannot_record(db_url: str, session: Session,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("GREENTWIN_AUDIT_KEYS", "GREENTWIN_AUDIT_KEY", "GREENTWIN_AUDIT_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "dev")
    assert cli_main(["user", "add", "olga", "--role", "admin", "--url", db_url,
                     "--state-dir", str(tmp_path)]) == 2
    assert "audit keys are not configured" in capsys.readouterr().err
    assert session.scalars(select(User)).all() == []


def test_user_cli_refuses_an_unmigrated_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["user", "list", "--url", f"sqlite:///{tmp_path / 'empty.sqlite3'}"]) == 2
    assert "greentwin db upgrade" in capsys.readouterr().err
