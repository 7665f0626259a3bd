"""The caller's own account preferences (``/api/me``): the language the pages and the API's sentences use."""

from __future__ import annotations

from typing import Literal

import anyio
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import CurrentUser, RuntimeDep
from app.models import User

router = APIRouter(prefix="/api/me", tags=["auth"])

Language = Literal["en", "zh-Hans"]
"""As :data:`audit.wording.LANGUAGES` (a test keeps the two equal)."""


class MePublic(BaseModel):
    username: str
    roles: list[str]
    language: Language = Field(description="the language of the pages and of the API's sentences "
                                            "(explanation_text, command_text, clips_text, alarm texts)")


class MeChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: Language = Field(description="en (English) or zh-Hans (Simplified Chinese)")


@router.get("")
def me(user: CurrentUser) -> MePublic:
    """Who you are and the language you read."""
    return MePublic(username=user.username, roles=sorted(user.roles), language=user.language)  # type: ignore[arg-type]


@router.patch("")
async def change_me(body: MeChange, user: CurrentUser, runtime: RuntimeDep) -> MePublic:
    """Choose your language; the next page and every API answer to you use it. Only ``en`` and ``zh-Hans``
    are accepted (422 otherwise)."""
    def store() -> None:
        with runtime.sessions.begin() as session:
            row = session.get(User, user.user_id)
            if row is None:
                raise HTTPException(status_code=404, detail="account no longer exists")
            row.language = body.language

    await anyio.to_thread.run_sync(store)
    return MePublic(username=user.username, roles=sorted(user.roles), language=body.language)
