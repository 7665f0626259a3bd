"""Typed bodies of the alarm API: the grouped list, acknowledgements, shelving, history, thresholds and
notification preferences. Free text is checked as every stored text is (:mod:`wire.fields`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, HttpUrl

from app.alarm_models import EMAIL_MAX_LEN, URL_MAX_LEN
from app.alarms.catalogue import Severity
from app.api.instants import Instant
from wire.fields import REASON_MAX_LEN, Reason, check_free_text

Comment = Annotated[str, Field(max_length=REASON_MAX_LEN), AfterValidator(check_free_text)]
SHELVE_MAX_MIN = 7 * 24 * 60


class AlarmPublic(BaseModel):
    """Occurrences of one kind of alarm in one greenhouse, grouped (they repeat every decision), in words."""

    id: str
    greenhouse_id: str
    kind: str
    severity: Severity
    title: str = Field(description="the kind in words, zones numbered from 1")
    description: str
    action: str = Field(description="what an operator should do")
    active: bool = Field(description="watched kinds: the condition holds now; "
                                     "events: an occurrence in the last 10 min")
    first_at: Instant
    last_at: Instant
    count: int
    acknowledged: bool
    acknowledged_by: str | None
    acknowledged_at: Instant | None
    ack_comment: str | None = None
    shelved: bool = False
    shelved_by: str | None = None
    shelved_until: Instant | None = None
    shelve_reason: str | None = None


class AlarmAck(BaseModel):
    id: str
    greenhouse_id: str
    kind: str
    acknowledged_by: str
    acknowledged_at: Instant
    through: Instant
    comment: str = ""


class AckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    comment: Comment = Field("", description="why, or what was done "
                                             "(kept with the acknowledgement and sealed)")


class ShelveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Reason
    minutes: int = Field(ge=1, le=SHELVE_MAX_MIN,
                         description="how long the alarm stays shelved (at most 7 days)")


class UnshelveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Reason


class AlarmActionPublic(BaseModel):
    """An acknowledgement, shelving or unshelving, as stored (and sealed in the audit trail)."""

    alarm_id: str
    greenhouse_id: str
    kind: str
    action: Literal["ack", "shelve", "unshelve"]
    actor: str
    at: Instant
    comment: str
    shelved_until: Instant | None = None


class AlarmEpisodePublic(BaseModel):
    """One spell of an alarm, from the occurrence that raised it to its clearing (null: still active)."""

    alarm_id: str
    greenhouse_id: str
    kind: str
    severity: Severity
    title: str
    raised_at: Instant
    last_at: Instant
    count: int
    cleared_at: Instant | None
    acknowledged_by: str | None
    acknowledged_at: Instant | None
    ack_comment: str | None


class KindPublic(BaseModel):
    code: str
    severity: Severity
    title: str
    description: str
    action: str
    watched: bool


Email = Annotated[str, Field(max_length=EMAIL_MAX_LEN, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]


class NotificationPrefs(BaseModel):
    """One user's notifications: channels and the least severe alarm they want to hear of."""

    model_config = ConfigDict(extra="forbid")
    min_severity: Severity = "critical"
    email: Email | None = None
    email_enabled: bool = False
    webhook_url: Annotated[HttpUrl, Field(max_length=URL_MAX_LEN)] | None = Field(
        None, description="your own receiver (its host must be allowed by GREENTWIN_NOTIFY_WEBHOOK_HOSTS); "
                          "null: the site's webhook")
    webhook_enabled: bool = False
