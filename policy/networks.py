"""Actor-critic for the greenhouse action space: Bernoulli valves, Beta pump and lights.

Valves are binary in the twin (thresholded at 0.5), so each gets a Bernoulli; pump and
lights are bounded percentages, so a Beta on (0, 1) scaled to 0-100 puts no probability
mass outside the actuator range (a clipped Gaussian would). Observation normalisation
lives inside the module so a saved state_dict carries it to serving.

Residual mode (``residual=ThresholdExpert(...)``): the head outputs adjustments to the
expert's decision instead of absolute actions. Valve logits are the head's output plus
``±prior_logit`` from the expert's open/closed choice; pump and lights are Betas whose mode
is the expert's setting moved by the head on the logit scale. With the near-zero initial
head, :meth:`ActorCritic.act` reproduces the expert. The expert's settings live in the
``residual_cfg`` buffer, so a saved state_dict restores the same policy under the same
architecture (the head has the same shape in both modes). The settings are one named value,
:class:`~policy.residual_settings.ResidualSettings`, which alone reads and writes that buffer.

Lamp switch (residual mode with ``lamp_logit`` > 0): the lamps become an on/off decision like a
valve, a Bernoulli at ``±lamp_logit`` from the expert's on/off plus the head's lights adjustment.
The expert's lamps are on or off (both lighting rules say 0 or 100 %), and a Beta centred on 0.1 %
explores only a few % of lamp power where the expert says off: the learner could never try an
hour of lamps the rule leaves dark, which is the decision a rule cannot plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.distributions import Bernoulli, Beta, kl_divergence

from policy.baselines import ThresholdExpert
from policy.normalize import RunningMeanStd
from policy.residual import ExpertPrior, expert_prior, interlock
from policy.residual_settings import ResidualSettings, complete_stored

BETA_EPS = 1e-4
"""Scaled continuous actions are clamped into (eps, 1 - eps): Beta log-densities are infinite at 0 and 1."""
ACTION_SCALE = 100.0
RESIDUAL_PRIOR_LOGIT = 4.0
"""Default valve logit given to the expert's choice: p(expert's choice) = 0.982 before learning."""
RESIDUAL_KAPPA = 20.0
"""Initial Beta concentration (alpha + beta - 2) around the expert's pump and lights (sd ~0.1)."""
RESIDUAL_MEAN_EPS = 1e-3
"""Expert pump/lights fractions are clamped into (eps, 1 - eps) before taking their logit."""
OFF_BELOW = 2e-3
"""A served pump or lights fraction below this (0.2 %) is 0: the residual cannot centre exactly on an
expert's 0, and a lamp at 0.1 % costs energy and lamp hours without light worth having."""


class ActionEvaluation(NamedTuple):
    """:meth:`ActorCritic.evaluate_actions`: per-sample tensors [B]."""

    logprob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor
    prior_kl: torch.Tensor | None


def action_parameters(out: torch.Tensor, zones: int, prior: ExpertPrior | None = None,
                      prior_logit: float | torch.Tensor = RESIDUAL_PRIOR_LOGIT,
                      lamp_logit: float | torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Switch logits [..., S] and the Betas' (alpha, beta) [..., C] from the actor's output
    [..., zones + 4]; any leading axes (a member axis included) broadcast. S = zones and C = 2
    (pump, lights), or with the lamp switch S = zones + 1 (valves, lamps) and C = 1 (pump).

    Plain mode (``prior`` None): the head gives the logits and log-concentrations directly.
    Residual mode: the expert's valve choice at ``±prior_logit`` plus the head's adjustment, and
    Betas whose mode is the expert's setting moved on the logit scale by the head; with
    ``lamp_logit``, the lamps' logit is the expert's on/off at ``±lamp_logit`` plus the head's
    lights adjustment (its lights concentration term goes unused).
    """
    logits, conc = out[..., :zones], out[..., zones:]
    if prior is None:
        # >= 1 keeps the density finite at the edges; exp (not softplus) lets BC reach the near-0
        # pump of "all valves closed" within a few hundred steps.
        c = 1.0 + conc.clamp(-10.0, 8.0).exp()
        return logits, c[..., :2], c[..., 2:]
    logits = logits + prior_logit * (2.0 * prior.valves.to(logits.dtype) - 1.0)
    mode = torch.sigmoid(torch.logit(prior.cont.to(conc.dtype).clamp(RESIDUAL_MEAN_EPS,
                                                                     1.0 - RESIDUAL_MEAN_EPS))
                         + conc[..., :2])
    kappa = RESIDUAL_KAPPA * conc[..., 2:].clamp(-5.0, 5.0).exp()
    # alpha, beta > 1 so the mode (alpha - 1) / (alpha + beta - 2) is exactly `mode`.
    alpha, beta = 1.0 + mode * kappa, 1.0 + (1.0 - mode) * kappa
    if lamp_logit is None:
        return logits, alpha, beta
    lamps_on = (prior.cont[..., 1:2] >= 0.5).to(conc.dtype)
    lamp = conc[..., 1:2] + lamp_logit * (2.0 * lamps_on - 1.0)
    return torch.cat([logits, lamp], dim=-1), alpha[..., :1], beta[..., :1]


def assemble_action(switches: torch.Tensor, u: torch.Tensor, zones: int) -> torch.Tensor:
    """The action [..., zones + 2] (valves, pump %, lights %) from switch states [..., S] in {0, 1}
    and Beta fractions [..., C] (see :func:`action_parameters`): switched lamps are 0 or 100 %."""
    if switches.shape[-1] == zones:
        return torch.cat([switches, u * ACTION_SCALE], dim=-1)
    return torch.cat([switches[..., :zones], u * ACTION_SCALE, switches[..., zones:] * ACTION_SCALE], dim=-1)


def split_action(action: torch.Tensor, zones: int, lamp_switch: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(switch states [..., S] in {0, 1}, Beta fractions [..., C] clamped into the Beta's open
    support): the inverse of :func:`assemble_action`."""
    valves = (action[..., :zones] >= 0.5).to(action.dtype)
    if lamp_switch:
        lamps = (action[..., zones + 1:] >= 0.5 * ACTION_SCALE).to(action.dtype)
        return (torch.cat([valves, lamps], dim=-1),
                (action[..., zones:zones + 1] / ACTION_SCALE).clamp(BETA_EPS, 1.0 - BETA_EPS))
    return valves, (action[..., zones:] / ACTION_SCALE).clamp(BETA_EPS, 1.0 - BETA_EPS)


def _distributions_of(params: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[Bernoulli, Beta]:
    logits, alpha, beta = params
    return Bernoulli(logits=logits, validate_args=False), Beta(alpha, beta, validate_args=False)


def deterministic_action(out: torch.Tensor, zones: int, prior: ExpertPrior | None = None,
                         prior_logit: float | torch.Tensor = RESIDUAL_PRIOR_LOGIT,
                         lamp_logit: float | torch.Tensor | None = None) -> torch.Tensor:
    """Serving's action [..., zones + 2] from the actor's output, before the interlock: a valve opens
    iff its probability is >= 0.5; pump and lights sit at the Beta's mean, or at its mode in residual
    mode (so the untrained residual policy is the expert). Leading axes broadcast as in
    :func:`action_parameters`."""
    logits, a, b = action_parameters(out, zones, prior, prior_logit,
                                     lamp_logit if prior is not None else None)
    u = a / (a + b) if prior is None else (a - 1.0) / (a + b - 2.0)
    # The residual's Beta centres on the expert's setting clamped to RESIDUAL_MEAN_EPS, so an expert's
    # "off" would serve as 0.1 % lamps (paid for, and counted as lamp hours): off is off.
    u = torch.where(u < OFF_BELOW, torch.zeros_like(u), u)
    dtype = out.dtype
    return assemble_action((torch.sigmoid(logits) >= 0.5).to(dtype), u.to(dtype), zones)


def _logprob_and_entropy(valves: Bernoulli, cont: Beta, v: torch.Tensor, u: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Joint log-prob [B] of switch samples ``v`` and Beta fractions ``u``, and the entropy [B]."""
    return (valves.log_prob(v).sum(1) + cont.log_prob(u).sum(1),
            valves.entropy().sum(1) + cont.entropy().sum(1))


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights, constant bias (the CleanRL / PPO-implementation-details default)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


class _SigmoidTanh(torch.autograd.Function):
    """tanh as 2 sigmoid(2x) - 1: the same function to float rounding (|difference| < 3e-7).

    ``torch.tanh`` on CPU runs a scalar-precise kernel: 4,096 x 64 takes 285 us on two cores,
    where ``sigmoid`` takes 32 us. The four tanh layers were a fifth of a PPO minibatch update.
    Backward uses the saved output, as tanh's own does: d tanh = 1 - y^2.
    """

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.mul(x, 2.0).sigmoid_().mul_(2.0).sub_(1.0)

    @staticmethod
    def setup_context(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[torch.Tensor],
                      output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return torch.ops.aten.tanh_backward(grad, y)


def fast_tanh(x: torch.Tensor) -> torch.Tensor:
    """Hyperbolic tangent, several times faster than ``torch.tanh`` on CPU (see :class:`_SigmoidTanh`)."""
    return _SigmoidTanh.apply(x)


class Tanh(nn.Module):
    """The torso's activation: :func:`fast_tanh` as a layer (no parameters, so state_dicts are unchanged)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_tanh(x)


def mlp(in_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(layer_init(nn.Linear(in_dim, hidden)), Tanh(),
                         layer_init(nn.Linear(hidden, hidden)), Tanh())


class SplitActor(nn.Module):
    """The actor's torso and head with the lights' output column taken from a torso of its own.

    Valves and pump share one torso; the lights (the lamp switch's logit) get their own, so a
    gradient from an irrigation decision cannot reshape the features the lamp decision reads, and
    cloning the lamps cannot bend the valves'. Not registered in :class:`ActorCritic` (which owns
    the four parts), only assembled for :meth:`ActorCritic.actor_layers`.
    """

    def __init__(self, torso: nn.Module, head: nn.Linear, lamp_torso: nn.Module, lamp_head: nn.Linear,
                 column: int) -> None:
        super().__init__()
        self.torso, self.head, self.lamp_torso, self.lamp_head = torso, head, lamp_torso, lamp_head
        self.column = column

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(self.torso(x))
        lamp = self.lamp_head(self.lamp_torso(x))
        return torch.cat([out[..., :self.column], lamp, out[..., self.column + 1:]], dim=-1)


def _run(layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x)
    return x


class ActorCritic(nn.Module):
    """Policy and value function over observations [B, obs_dim]; actions are [B, zones + 2]."""

    residual_cfg: torch.Tensor

    def __init__(self, obs_dim: int, zones: int, hidden: int = 64, shared_torso: bool = False,
                 residual: ThresholdExpert | None = None, prior_logit: float = RESIDUAL_PRIOR_LOGIT,
                 lamp_logit: float = 0.0, lamp_torso: bool = False) -> None:
        super().__init__()
        self.obs_dim, self.zones = obs_dim, zones
        # A buffer, so checkpoints carry the expert (its break-even lighting included) and the lamp switch.
        if lamp_logit < 0.0 or (lamp_logit > 0.0 and residual is None):
            raise ValueError(f"lamp_logit must be >= 0 and needs a residual expert, got {lamp_logit}")
        settings = ResidualSettings() if residual is None else \
            ResidualSettings.of_expert(residual, prior_logit, lamp_logit)
        self.register_buffer("residual_cfg", settings.to_tensor())
        self._residual_cache: tuple[torch.Tensor, int, ResidualSettings, ThresholdExpert | None] | None = None
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.actor_torso = mlp(obs_dim, hidden)
        self.critic_torso = self.actor_torso if shared_torso else mlp(obs_dim, hidden)
        # Small policy gain: near-uniform valves and Beta(~2, ~2) at the start.
        self.actor_head = layer_init(nn.Linear(hidden, zones + 4), gain=0.01)
        self.critic_head = layer_init(nn.Linear(hidden, 1), gain=1.0)
        # The lights' column from a torso of its own (see SplitActor); None: from the actor's.
        self.lamp_torso = mlp(obs_dim, hidden) if lamp_torso else None
        self.lamp_head = layer_init(nn.Linear(hidden, 1), gain=0.01) if lamp_torso else None
        if residual is not None:  # zero adjustments: the untrained residual policy is the expert
            nn.init.zeros_(self.actor_head.weight)
            if self.lamp_head is not None:
                nn.init.zeros_(self.lamp_head.weight)
                nn.init.zeros_(self.lamp_head.bias)
        # A tuple, so the module tree does not register the split's parts twice.
        self._split = (SplitActor(self.actor_torso, self.actor_head, self.lamp_torso, self.lamp_head,
                                  zones + 1),) \
            if self.lamp_torso is not None and self.lamp_head is not None else None

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        """Checkpoints from before residual mode lack the buffer: they are plain policies. Older ones
        carry fewer settings and load with the defaults of the rest (:func:`complete_stored`)."""
        key = prefix + "residual_cfg"
        state_dict[key] = complete_stored(state_dict.get(key))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def update_obs_stats(self, obs: torch.Tensor) -> None:
        """Fold a batch of raw observations into the normaliser (call on rollouts, not on updates)."""
        self.obs_rms.update(obs)

    def residual_settings(self) -> ResidualSettings:
        """The residual's settings as the ``residual_cfg`` buffer holds them now."""
        return self._residual()[0]

    def _residual(self) -> tuple[ResidualSettings, ThresholdExpert | None]:
        """(settings, expert) read from the ``residual_cfg`` buffer, once per change of it.

        Every forward needs them; reading the buffer each time would cost a device sync.
        """
        buf = self.residual_cfg
        # Absent, or of another shape, on modules unpickled from older versions.
        cache = getattr(self, "_residual_cache", None)
        # replaced or changed
        if cache is None or len(cache) != 4 or cache[0] is not buf or cache[1] != buf._version:
            settings = ResidualSettings.from_tensor(buf)
            cache = self._residual_cache = (buf, buf._version, settings, settings.expert(self.zones))
        return cache[2], cache[3]

    @property
    def is_residual(self) -> bool:
        return self._residual()[1] is not None

    def expert(self) -> ThresholdExpert | None:
        """The expert a residual policy adjusts (None in the plain mode)."""
        return self._residual()[1]

    @property
    def lamp_switch(self) -> bool:
        """The lamps are an on/off decision (a Bernoulli), not a Beta (see :func:`action_parameters`)."""
        return self._residual()[0].switch_logit is not None

    def prior(self, obs: torch.Tensor) -> ExpertPrior | None:
        """The expert's decision a residual policy adjusts, for raw observations (None in the plain
        mode). A function of the observation only: compute it once and pass it to every
        :meth:`distributions` call on the same observations."""
        expert = self.expert()
        return None if expert is None else expert_prior(expert, obs)

    def actor_layers(self) -> tuple[nn.Module, ...]:
        """The actor's forward pass, in order: the observation normaliser, the torso, the head.
        :meth:`forward` runs them; :func:`policy.ensemble.forward_members` runs the same layers
        of several members side by side."""
        split = getattr(self, "_split", None)  # absent on modules unpickled from before the lamp torso
        return ((self.obs_rms, *self.actor_torso, self.actor_head) if split is None
                else (self.obs_rms, split[0]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's raw output [B, zones + 4] for raw observations: valve logits, then the
        pump/lights concentration terms (see :func:`action_parameters`)."""
        return _run(self.actor_layers(), obs)

    def _actor_out(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` from observations the normaliser has already seen to."""
        return _run(self.actor_layers()[1:], x)

    def distributions(self, obs: torch.Tensor, prior: ExpertPrior | None = None) -> tuple[Bernoulli, Beta]:
        """Valve Bernoullis [B, zones] and pump/lights Betas [B, 2] for raw observations.

        ``prior``: :meth:`prior` of the same observations, if the caller has it already.
        Parameters are finite and in range by construction (a finite network, concentrations
        >= 1), so the distributions skip their argument checks: each costs a device sync.
        """
        return self._distributions(obs, self.obs_rms.normalize(obs), prior)

    def _distributions(self, obs: torch.Tensor, x: torch.Tensor, prior: ExpertPrior | None
                       ) -> tuple[Bernoulli, Beta]:
        """:meth:`distributions` given ``x``, the normalised ``obs`` (the value head shares it)."""
        settings, expert = self._residual()
        if expert is not None and prior is None:
            prior = expert_prior(expert, obs)
        return _distributions_of(action_parameters(self._actor_out(x), self.zones,
                                                   prior if expert is not None else None,
                                                   settings.prior_logit, settings.switch_logit))

    def prior_distributions(self, prior: ExpertPrior) -> tuple[Bernoulli, Beta]:
        """The untrained residual policy's distributions (zero adjustments) for the expert's decision:
        the reference of :meth:`evaluate_actions`' ``prior_kl``."""
        settings = self.residual_settings()
        zeros = torch.zeros((prior.valves.shape[0], self.zones + 4), dtype=prior.cont.dtype,
                            device=prior.cont.device)
        return _distributions_of(action_parameters(zeros, self.zones, prior, settings.prior_logit,
                                                   settings.switch_logit))

    def evaluate_actions(self, obs: torch.Tensor, action: torch.Tensor, prior: ExpertPrior | None = None,
                         prior_kl_rows: int = 0, reference: ActorCritic | None = None) -> ActionEvaluation:
        """What the PPO update needs of stored actions, from one forward pass: log-prob [B], entropy [B],
        value [B] and, with ``prior_kl_rows`` n > 0 (residual mode), KL(policy || untrained residual) of
        the first n rows [n], the divergence from the expert's decision that
        :attr:`PPOConfig.prior_kl_coef` charges for. The update's rows come shuffled, so the first n
        are a random sample: its mean is unbiased, and the Beta KL's lgamma and digamma (a fifth of an
        update over all rows) cost a quarter as much on a quarter of them. ``reference`` (a frozen
        policy of the same layout) replaces the untrained residual as the KL's target."""
        if prior_kl_rows > 0 and prior is None:
            prior = self.prior(obs)
            if prior is None:
                raise ValueError("the KL to the prior needs a residual policy")
        x = self.obs_rms.normalize(obs)
        valves, cont = self._distributions(obs, x, prior)
        _, v, u = self._draw(valves, cont, action)
        logprob, entropy = _logprob_and_entropy(valves, cont, v, u)
        prior_kl = None
        if prior_kl_rows > 0:
            assert prior is not None
            n = prior_kl_rows
            first = ExpertPrior(prior.valves[:n], prior.cont[:n])
            if reference is None:
                valves0, cont0 = self.prior_distributions(first)
            else:
                with torch.no_grad():
                    valves0, cont0 = reference.distributions(obs[:n], first)
            head_valves = Bernoulli(logits=valves.logits[:n], validate_args=False)
            head_cont = Beta(cont.concentration1[:n], cont.concentration0[:n], validate_args=False)
            prior_kl = kl_divergence(head_valves, valves0).sum(1) + kl_divergence(head_cont, cont0).sum(1)
        return ActionEvaluation(logprob, entropy, self._value(x), prior_kl)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        """State value [B]."""
        return self._value(self.obs_rms.normalize(obs))

    def _value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic_head(self.critic_torso(x)).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None,
                             prior: ExpertPrior | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or evaluate the given) action: returns (action, logprob [B], entropy [B], value [B]).

        ``prior``: :meth:`prior` of ``obs`` when the caller has it (rollouts keep it for the update)."""
        x = self.obs_rms.normalize(obs)
        valves, cont = self._distributions(obs, x, prior)
        action, v, u = self._draw(valves, cont, action)
        return action, *_logprob_and_entropy(valves, cont, v, u), self._value(x)

    def sample(self, obs: torch.Tensor, prior: ExpertPrior | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, logprob [B], value [B]): :meth:`get_action_and_value` without the entropy, which a
        rollout discards; the same draws from the same generator, so the same results."""
        x = self.obs_rms.normalize(obs)
        valves, cont = self._distributions(obs, x, prior)
        action, v, u = self._draw(valves, cont, None)
        return action, valves.log_prob(v).sum(1) + cont.log_prob(u).sum(1), self._value(x)

    def _draw(self, valves: Bernoulli, cont: Beta, action: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, switch samples, Beta fractions): a fresh sample, or those of ``action``."""
        if action is None:
            with torch.no_grad():
                v = valves.sample()
                u = cont.sample().clamp(BETA_EPS, 1.0 - BETA_EPS)
            return assemble_action(v, u, self.zones), v, u
        v, u = split_action(action, self.zones, self.lamp_switch)
        return action, v, u

    def log_prob_parts(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-valve log-probs [B, zones] and the pump's and lights' log-probs [B, 2] (for BC weighting)."""
        valves, cont = self.distributions(obs)
        v, u = split_action(action, self.zones, self.lamp_switch)
        lp_switch, lp_cont = valves.log_prob(v), cont.log_prob(u)
        if self.lamp_switch:
            return lp_switch[:, :self.zones], torch.cat([lp_cont, lp_switch[:, self.zones:]], dim=1)
        return lp_switch, lp_cont

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for serving: valve (and switched lamps) on iff p >= 0.5, pump and lights
        at the Beta mean (the mode in residual mode, so the untrained policy is the expert), then the
        pump interlock."""
        settings, expert = self._residual()
        prior = None if expert is None else expert_prior(expert, obs)
        return interlock(deterministic_action(self(obs), self.zones, prior, settings.prior_logit,
                                              settings.switch_logit),
                         self.zones, obs)
