"""The settings table of ``deploy/README.md``, generated from :class:`app.core.config.Settings`.

Each row is a field: its variable, its default and the docstring under it, so the documented
table cannot drift from the model (a test compares the two).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

from app.core.config import DEFAULT_POLICY_DIR, Settings

ENV_PREFIX = "GREENTWIN_"
# Outside the model: read before it is built, to find the secret files the model reads.
EXTRA_ROWS = (("GREENTWIN_SECRETS_DIR", "", "Directory of secret files, one per setting, named like the "
               "variable in lower case (`greentwin_secret_key`); a variable of the same name wins."),)


def _default(value: object) -> str:
    """The default as an operator would write it (paths relative to the installation, secrets unset)."""
    if value is None or value is PydanticUndefined:
        return ""
    if isinstance(value, SecretStr):
        return "(secret)"
    if value == DEFAULT_POLICY_DIR:
        return "the shipped ensemble (`policy/shipped`)"
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def settings_rows() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) per setting; a field without a docstring is an error."""
    rows = []
    for name, field in Settings.model_fields.items():
        if not field.description:
            raise ValueError(f"Settings.{name} has no docstring: document it under the field")
        rows.append((ENV_PREFIX + name.upper(), _default(field.default), " ".join(field.description.split())))
    return rows + list(EXTRA_ROWS)


def settings_markdown() -> str:
    """The table as Markdown, pipes in meanings escaped."""
    lines = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for var, default, meaning in settings_rows():
        escaped = meaning.replace("|", r"\|")
        lines.append(f"| `{var}` | {default} | {escaped} |")
    return "\n".join(lines) + "\n"
