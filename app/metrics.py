"""Prometheus metrics of the runtime, in three layers: lifecycle, per greenhouse, infrastructure.

Each metric lives in its own registry per service instance, so tests and several apps in one
process never collide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.decision_latency = Histogram(
            "greentwin_decision_latency_seconds",
            "Telemetry received to command published (incl. persistence)", ["greenhouse"], registry=r,
            buckets=(0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0))
        self.decisions = Counter("greentwin_decisions_total", "Control decisions by actor",
                                 ["greenhouse", "actor"], registry=r)
        self.telemetry = Counter("greentwin_telemetry_total", "Telemetry messages by outcome and reason",
                                 ["outcome", "reason"], registry=r)
        self.safety_clips = Counter("greentwin_safety_clips_total", "Safety rule firings",
                                    ["greenhouse", "rule"], registry=r)
        self.estops = Counter("greentwin_estops_total", "E-stops latched by source", ["greenhouse", "source"],
                              registry=r)
        self.mqtt_reconnects = Counter("greentwin_mqtt_reconnects_total", "Broker reconnections", registry=r)
        self.ack_timeouts = Counter("greentwin_ack_timeouts_total", "Commands not acknowledged in time",
                                    ["greenhouse"], registry=r)
        self.alarms = Counter("greentwin_alarms_total", "Alarms raised by kind",
                              ["greenhouse", "kind"], registry=r)
        self.telemetry_shed = Counter("greentwin_telemetry_shed_total",
                                      "Valid telemetry dropped under load (rate_limit, inbox_full)",
                                      ["greenhouse", "reason"], registry=r)
        # The journal could not be written (a full disk): these decisions were not commanded.
        self.unjournaled = Counter("greentwin_decisions_unjournaled_total",
                                   "Decisions not commanded because the journal write failed", ["greenhouse"],
                                   registry=r)
        self.spooled = Gauge("greentwin_decisions_spooled", "Decisions waiting in the local spool (DB down)",
                             registry=r)
        self.low_confidence = Counter("greentwin_low_confidence_total",
                                      "Decisions handed to the expert fallback", ["greenhouse"], registry=r)
        self.notifications = Counter("greentwin_notifications_total",
                                     "Alarm notifications by channel and outcome "
                                     "(sent, failed, repeat, held, dropped)",
                                     ["channel", "outcome"], registry=r)
        # No username label: it would grow without bound and tell which accounts exist.
        self.logins = Counter("greentwin_logins_total", "Successful API logins", registry=r)
        self.login_failures = Counter("greentwin_login_failures_total",
                                      "Refused API logins by reason "
                                      "(bad_credentials, disabled, rate_limited, locked)",
                                      ["reason"], registry=r)
        self.login_lock_changes = Counter("greentwin_login_lock_changes_total",
                                          "Account login locks by change "
                                          "(locked, lifted by an admin, expired)",
                                          ["change"], registry=r)
        # Audit sealing (the writer process reports them): a growing count or an old seal time
        # means records are not reaching the trail.
        self.audit_unsealed = Gauge("greentwin_audit_unsealed_events",
                                    "Audit events queued and not sealed yet", registry=r)
        self.audit_last_seal = Gauge("greentwin_audit_last_seal_timestamp_seconds",
                                     "Unix time of the last audit seal (0: none since start)", registry=r)
        # Leases: the fencing token this replica commands a greenhouse with (0 while another holds it).
        self.lease_token = Gauge("greentwin_lease_token",
                                 "Fencing token of a lease this replica holds, else 0",
                                 ["greenhouse"], registry=r)
        self.lease_changes = Counter("greentwin_lease_changes_total",
                                     "Leases gained and lost by this replica", ["change"], registry=r)
