"""Gaussian single-index models at the SQ bound (Chen, Wu, Lu, Yang, Wang; ICLR 2025).

A two-layer network's first layer trained by online spherical SGD on fresh samples with a
label transform T and a smoothed Hermite correlation loss learns theta* from
n ~ d^{s*/2 v 1} samples (s* the generative exponent), the statistical-query bound; the
vanilla algorithm needs d^{k*-1}. Pieces:

* ``links``: ``Link`` (function, declared k* and s*, transform), the built-ins ``LINKS``
  (he2, he3, he4, bin3), ``check_link`` (the exponents against Monte Carlo Hermite
  coefficients), ``hermite``.
* ``losses``: the smoothed loss in closed form (``smoothed_hermite``, ``oracle_slope``,
  ``correlation_loss``, ``Oracle``).
* ``kernel``: ``spherical_step`` (w in R^d) and ``alignment_step`` (its exact alignment
  chain), ``online_solver`` / ``run_online`` (R seeds, a ``core.contract.Solver``),
  ``support_solver`` / ``run_support`` (the sparse variant), ``second_layer_fit``.
* ``train.run(config, workdir, links=...)``: the experiment (n* per link, algorithm and d,
  slopes with bootstrap intervals, sparse, stage 2) as a typed ``RunResult``;
  ``plotting`` draws it; ``configs.default.get_config(preset)``.
"""

from jaxlib_papers.single_index import configs, kernel, links, losses, train
from jaxlib_papers.single_index.configs import default as _default  # noqa: F401
from jaxlib_papers.single_index.kernel import (
    OnlineResult,
    OnlineState,
    RidgeSettings,
    RunSpec,
    SparseSettings,
    StepSettings,
    alignment_step,
    online_solver,
    run_online,
    run_support,
    second_layer_fit,
    spherical_step,
    support_solver,
)
from jaxlib_papers.single_index.links import LINKS, Link, check_link, hermite
from jaxlib_papers.single_index.losses import (
    Oracle,
    correlation_loss,
    oracle_slope,
    smoothed_hermite,
)
from jaxlib_papers.single_index.train import RunResult, run

__all__ = [
    "LINKS", "Link", "OnlineResult", "OnlineState", "Oracle", "RidgeSettings", "RunResult",
    "RunSpec", "SparseSettings", "StepSettings", "alignment_step", "check_link", "configs",
    "correlation_loss", "hermite", "kernel", "links", "losses", "online_solver",
    "oracle_slope", "run", "run_online", "run_support", "second_layer_fit",
    "smoothed_hermite", "spherical_step", "support_solver", "train",
]
