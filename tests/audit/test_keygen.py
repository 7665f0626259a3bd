"""``greentwin audit keygen``: owner-only key files, no overwrite, rotation keeps old keys."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from audit.crypto import Keyring, Signer


def _greentwin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True,
                          timeout=60)


def test_keygen_writes_owner_only_keys_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = _greentwin("audit", "keygen", "--out", str(tmp_path / "keys"))
    assert out.returncode == 0, out.stderr
    ring_path, pem_path = tmp_path / "keys" / "greentwin_audit_key", tmp_path / "keys" / "audit_signing_key"
    keyring = Keyring.from_file(ring_path)
    Signer.from_pem(pem_path.read_bytes())
    for path in (ring_path, pem_path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert keyring.current_key_id in out.stdout
    assert ring_path.read_text().strip() not in out.stdout  # ids only, never key material

    again = _greentwin("audit", "keygen", "--out", str(tmp_path / "keys"))
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    assert Keyring.from_file(ring_path) == keyring


def test_rotate_puts_a_new_current_key_in_front_and_keeps_the_old_ones(tmp_path: Path) -> None:
    assert _greentwin("audit", "keygen", "--out", str(tmp_path)).returncode == 0
    ring_path = tmp_path / "greentwin_audit_key"
    old = Keyring.from_file(ring_path)
    out = _greentwin("audit", "keygen", "--rotate", str(ring_path))
    assert out.returncode == 0, out.stderr
    new = Keyring.from_file(ring_path)
    assert new.current_key_id != old.current_key_id
    assert new.key_ids[1:] == old.key_ids
    assert stat.S_IMODE(os.stat(ring_path).st_mode) == 0o600
