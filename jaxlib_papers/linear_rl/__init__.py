"""Null-space randomized LSVI under linear Bellman completeness (Wu et al., ICLR 2025).

Public API:

* :mod:`envs`: ``deep_sea``, ``linear_system``, ``lqr`` (pure-function
  environments with deterministic dynamics and linear features), ``lqr_riccati``.
* :mod:`kernel`: ``AgentConfig``, ``make_agent`` (null-space randomized LSVI,
  LSVI-UCB, RLSVI, epsilon-greedy LSVI), ``run`` (one seed, one ``lax.scan``),
  ``simulate`` (vmapped over seeds, float64), and the linear-algebra kernels
  ``span_update``, ``min_norm_lstsq``, ``null_space_noise``,
  ``d_optimal_design``.
* :mod:`train`: ``run(config, workdir)`` runs the experiment of a config.
"""

from jaxlib_papers.linear_rl import envs, kernel
from jaxlib_papers.linear_rl.envs import deep_sea, linear_system, lqr, lqr_riccati
from jaxlib_papers.linear_rl.kernel import (
                                            AGENTS,
                                            AgentConfig,
                                            d_optimal_design,
                                            make_agent,
                                            min_norm_lstsq,
                                            null_space_noise,
                                            run,
                                            simulate,
                                            span_update,
)

__all__ = [
    "AGENTS", "AgentConfig", "d_optimal_design", "deep_sea", "envs", "kernel",
    "linear_system", "lqr", "lqr_riccati", "make_agent", "min_norm_lstsq",
    "null_space_noise", "run", "simulate", "span_update",
]
