"""linear_rl configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

No neural nets and no training loop: ``train.run`` runs every agent of the
chosen experiment for ``run.num_episodes`` episodes on ``run.num_seeds`` seeds
(one vmapped ``lax.scan`` per agent) and writes ``results.json``.

Experiments (``experiment``):

* ``deep_sea``: null-space randomized LSVI against LSVI-UCB (at every beta of
  ``deep_sea.ucb_betas``), RLSVI and epsilon-greedy LSVI.
* ``linear_system``: null-space randomized LSVI at each ``num_actions`` of
  ``linear_system.num_actions_grid`` (large finite action sets).
* ``lqr``: null-space randomized LSVI on the scalar LQR with quadratic
  features; reports greedy gains against the Riccati gains.

Presets: smoke (seconds: tests, CI, the demo), cpu (the reproduction size:
DeepSea N = 10, T = 1000, 10 seeds; pass ``--config.deep_sea.env.size=20`` for
N = 20), full (N = 20 and K up to 10^4).
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_AGENT = dict(
    sigma_theta=1.0,      # null-space noise scale sigma_h (all h)
    sigma_reward=0.1,     # reward-noise scale sigma_R
    ridge=1.0,            # lambda of Sigma = lambda I + X^T X
    beta=1.0,             # LSVI-UCB bonus (overridden by ucb_betas)
    epsilon=0.1,          # epsilon-greedy LSVI
    rlsvi_noise=1.0,      # RLSVI likelihood noise std
    rlsvi_prior=1.0,      # RLSVI prior precision
    span_tol=1e-8,        # relative residual that adds a span direction
    design_iters=500,     # Frank-Wolfe iterations of the D-optimal design
)

_BASE = dict(
    seed=0,
    experiment="deep_sea",
    run=dict(num_episodes=1000, num_seeds=10),
    deep_sea=dict(
        env=dict(size=10, reward_noise=False),
        agents=("nullspace", "lsvi_ucb", "rlsvi", "eps_greedy"),
        ucb_betas=(0.3, 1.0, 3.0),
        agent=dict(_AGENT),
    ),
    linear_system=dict(
        env=dict(state_dim=3, action_dim=3, horizon=5, contraction=0.8,
                 reward_noise=True),
        num_actions_grid=(10, 100, 1000),
        agents=("nullspace",),
        # sigma_R = 0.5 ~ the sd of the Bernoulli rewards (means near 0.5).
        agent=dict(_AGENT, sigma_reward=0.5),
    ),
    lqr=dict(
        env=dict(a=0.5, b=1.0, q=1.0, r=1.0, action_bound=2.0, horizon=5,
                 initial_bound=1.0, reward_noise=False),
        agents=("nullspace",),
        # Deterministic rewards: no reward noise and a vanishing ridge, so the
        # fitted Q is exact once the data span the features.
        agent=dict(_AGENT, sigma_reward=0.0, ridge=1e-10),
    ),
)

_OVERRIDES = {
    "smoke": {
        "run.num_episodes": 60, "run.num_seeds": 2,
        "deep_sea.env.size": 5, "deep_sea.ucb_betas": (1.0,),
        "deep_sea.agents": ("nullspace", "lsvi_ucb", "eps_greedy"),
        "linear_system.num_actions_grid": (10,),
    },
    "cpu": {},
    "full": {
        "run.num_seeds": 100, "deep_sea.env.size": 20,
        "linear_system.num_actions_grid": (10, 100, 1000, 10000),
    },
}


_AGENTS = C.each(C.one_of("nullspace", "lsvi_ucb", "rlsvi", "eps_greedy"))


def _agent_constraints(group: str) -> dict[str, C.Constraint]:
  return {f"{group}.agents": _AGENTS, f"{group}.agent.sigma_theta": C.non_negative(),
          f"{group}.agent.sigma_reward": C.non_negative(),
          f"{group}.agent.ridge": C.positive(), f"{group}.agent.beta": C.non_negative(),
          f"{group}.agent.epsilon": C.in_range(0.0, 1.0)}


# What every key allows, checked when a config is built and again by the launcher (after
# command-line overrides), before anything compiles.
CONSTRAINTS = {
    "seed": C.at_least(0),
    "experiment": C.one_of("deep_sea", "linear_system", "lqr"),
    "run.num_episodes": C.at_least(1), "run.num_seeds": C.at_least(1),
    "deep_sea.env.size": C.at_least(2), "deep_sea.ucb_betas": C.each(C.non_negative()),
    "linear_system.env.horizon": C.at_least(1),
    "linear_system.env.contraction": C.in_range(0.0, 1.0),
    "linear_system.num_actions_grid": C.each(C.at_least(1)),
    "lqr.env.horizon": C.at_least(1), "lqr.env.action_bound": C.positive(),
    **_agent_constraints("deep_sea"), **_agent_constraints("linear_system"),
    **_agent_constraints("lqr"),
}


def get_config(preset: str = "smoke"):
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
