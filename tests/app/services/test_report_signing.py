"""The report's signing identity, as the command line and the API both get it from app.services."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import Settings
from app.services.report_signing import dev_signing_paths, signing_identity, trusted_certificate


def _settings(**kw: object) -> Settings:
    return Settings(database_url="sqlite://", **kw)  # type: ignore[arg-type]


def test_a_dev_pair_is_generated_once_with_a_note_and_then_reused(tmp_path: Path) -> None:
    notes: list[str] = []
    first = signing_identity(_settings(environment="dev"), tmp_path, note=notes.append)
    again = signing_identity(_settings(environment="dev"), tmp_path, note=notes.append)
    key, cert = dev_signing_paths(tmp_path)
    assert key.is_file() and cert.is_file()
    assert again.cert == first.cert
    assert len(notes) == 1 and str(cert) in notes[0]  # verifiers are told which certificate to trust
    assert trusted_certificate(_settings(environment="dev"), tmp_path) == cert


def test_prod_and_half_configured_keys_are_refused(tmp_path: Path) -> None:
    prod = _settings(environment="dev").model_copy(update={"environment": "prod"})  # only what signing reads
    with pytest.raises(ValueError, match="not configured"):
        signing_identity(prod, tmp_path)
    half = tmp_path / "cert.pem"
    half.write_text("")
    with pytest.raises(ValueError, match="or neither"):
        signing_identity(_settings(environment="dev", report_cert=half), tmp_path)
    assert not dev_signing_paths(tmp_path)[0].exists()
    assert trusted_certificate(_settings(environment="dev", report_cert=half), tmp_path) == half
