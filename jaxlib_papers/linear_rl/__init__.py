"""Null-space randomized LSVI under linear Bellman completeness (Wu et al., ICLR 2025).

Public API:

* :mod:`envs`: ``deep_sea``, ``linear_system``, ``lqr`` (pure-function
  environments with deterministic dynamics and linear features), ``lqr_riccati``.
* :mod:`kernel`: ``AgentConfig``, ``make_agent`` (null-space randomized LSVI,
  LSVI-UCB, RLSVI, epsilon-greedy LSVI, on the core episodic contract
  ``core.contract.Agent``), ``run_episodes`` (one seed, one ``lax.scan``),
  and the linear-algebra kernels
  ``span_update``, ``min_norm_lstsq``, ``null_space_noise``,
  ``d_optimal_design``.
* :mod:`train`: ``simulate`` (seeds vmapped and jitted, float64) and ``run(config,
  workdir)``, the experiment of a config; configs in :mod:`configs.default`.
"""

from jaxlib_papers.linear_rl import configs, envs, kernel, train
from jaxlib_papers.linear_rl.configs import default as _default  # noqa: F401  (configs.default)
from jaxlib_papers.linear_rl.envs import deep_sea, linear_system, lqr, lqr_riccati
from jaxlib_papers.linear_rl.kernel import (
                                            AGENTS,
                                            AgentConfig,
                                            check_agent,
                                            d_optimal_design,
                                            make_agent,
                                            min_norm_lstsq,
                                            null_space_noise,
                                            run_episodes,
                                            span_update,
)
from jaxlib_papers.linear_rl.train import simulate

__all__ = [
    "AGENTS", "AgentConfig", "check_agent", "configs", "d_optimal_design", "deep_sea",
    "envs", "kernel",
    "linear_system", "lqr", "lqr_riccati", "make_agent", "min_norm_lstsq",
    "null_space_noise", "run_episodes", "simulate", "span_update", "train",
]
