"""The residual's settings as a named value: its stored layout, its round trips, and the older
buffer lengths a checkpoint may still hold."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from policy.baselines import ThresholdExpert
from policy.networks import ActorCritic
from policy.residual_settings import OLDER_LENGTHS, PRICE_BLIND_C0, SLOTS, ResidualSettings, complete_stored

ZONES = 6


def test_the_layout_is_the_one_checkpoints_were_written_in() -> None:
    assert SLOTS == ("enabled", "refill", "stop", "pump_pct", "prior_logit", "c0", "par_sat", "h_max",
                     "lamp_logit")
    assert OLDER_LENGTHS == (5, 8)
    assert ResidualSettings().to_tensor().tolist() == \
        [0.0] * 5 + [PRICE_BLIND_C0, ThresholdExpert.par_sat, ThresholdExpert.h_max, 0.0]


@pytest.mark.parametrize("expert", [ThresholdExpert(zones=ZONES, refill=0.3, stop=0.8, pump_pct=55.0),
                                    ThresholdExpert(zones=ZONES, c0=2.5, par_sat=800.0, h_max=16.0)])
def test_settings_round_trip_through_the_buffer_and_give_back_the_expert(expert: ThresholdExpert) -> None:
    settings = ResidualSettings.of_expert(expert, prior_logit=3.0, lamp_logit=2.0)
    stored = settings.to_tensor()
    assert stored.dtype == torch.float64 and ResidualSettings.from_tensor(stored) == settings
    assert settings.expert(ZONES) == expert and settings.switch_logit == 2.0
    assert dataclasses.replace(settings, lamp_logit=0.0).switch_logit is None
    assert ResidualSettings().expert(ZONES) is None and ResidualSettings(lamp_logit=1.0).switch_logit is None


def test_the_network_reads_and_writes_its_buffer_through_the_named_value() -> None:
    expert = ThresholdExpert(zones=ZONES, c0=1.0)
    agent = ActorCritic(40, ZONES, residual=expert, prior_logit=3.5, lamp_logit=1.5)
    assert agent.residual_settings() == ResidualSettings.of_expert(expert, 3.5, 1.5)
    assert torch.equal(agent.residual_cfg, agent.residual_settings().to_tensor())
    assert ActorCritic(40, ZONES).residual_settings() == ResidualSettings()


@pytest.mark.parametrize("length", [5, 8])
def test_older_buffers_get_the_defaults_of_the_slots_they_lack(length: int) -> None:
    current = ResidualSettings.of_expert(ThresholdExpert(zones=ZONES, c0=1.0), 4.0, 2.0).to_tensor()
    completed = complete_stored(current[:length].clone())
    defaults = ResidualSettings().to_tensor()
    assert torch.equal(completed[:length], current[:length]) \
        and torch.equal(completed[length:], defaults[length:])
    assert torch.equal(complete_stored(None), defaults)  # before residual mode: a plain policy
    odd = torch.zeros(7, dtype=torch.float64)
    assert complete_stored(odd) is odd  # left for the state_dict's shape check to refuse
    with pytest.raises(ValueError, match="9 values"):
        ResidualSettings.from_tensor(odd)
