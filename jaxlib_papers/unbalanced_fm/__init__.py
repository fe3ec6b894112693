"""Unbalanced flow matching (Corso, Somnath, Getz, Barzilay, Jaakkola, Krause; ICLR 2025).

Flow matching on a coupling q whose marginals may differ from p0 and p1: pairs kept only
below a cost cutoff trade sample efficiency (acceptance, D2(q0 || p0)) for a smaller
approximation error; sampling still starts from p0. Pieces:

* ``couplings``: fixed-shape pairs and weights under ``jit`` from a cost matrix: the
  paper's ``cutoff``, the code's ``paired_cutoff`` and ``candidate`` rules, ``gibbs``,
  ``uot_plan`` (ott-jax, KL-relaxed), ``partial_plan`` (mass m), ``sample_pairs``; the
  diagnostics ``cutoff_stats`` / ``plan_stats`` (Z, D2, TV, E_q[c^2]) and ``class_tv``.
* ``geometry``: ``kabsch_rmsd`` (SVD, det-corrected, a finite gradient at 0),
  ``pairwise_rmsd``, ``violations`` and ``flat_bottom_energy``.
* ``problems``: reweighted modes (closed form) and the 8-atom ligand chain (apo -> holo in
  a pocket; docked candidates for relaxation).
* ``losses``: ``weighted_fm_loss`` (masked mean, 0 for an empty batch; the energy term of
  the one-step prediction) and ``euler``.
* ``kernel``: members (cutoff x energy weight x seed) of a docking or relaxation flow in
  one vmapped ``TrainKernel``.
* ``train.run(config, workdir)``: the experiment as a typed ``RunResult``; ``plotting``
  draws it; ``configs.default.get_config(preset)``.
"""

from jaxlib_papers.unbalanced_fm import (
    configs,
    couplings,
    geometry,
    kernel,
    losses,
    problems,
    train,
)
from jaxlib_papers.unbalanced_fm.configs import default as _default  # noqa: F401
from jaxlib_papers.unbalanced_fm.couplings import (
    CandidateRule,
    CouplingStats,
    Pairs,
    candidate,
    class_tv,
    cutoff,
    cutoff_stats,
    gibbs,
    paired_cutoff,
    partial_plan,
    plan_stats,
    sample_pairs,
    uot_plan,
)
from jaxlib_papers.unbalanced_fm.geometry import (
    flat_bottom_energy,
    kabsch_rmsd,
    pairwise_rmsd,
    violations,
)
from jaxlib_papers.unbalanced_fm.losses import euler, weighted_fm_loss
from jaxlib_papers.unbalanced_fm.train import RunResult, run

__all__ = [
    "CandidateRule", "CouplingStats", "Pairs", "RunResult", "candidate", "class_tv",
    "configs", "couplings", "cutoff", "cutoff_stats", "euler", "flat_bottom_energy",
    "geometry", "gibbs", "kabsch_rmsd", "kernel", "losses", "paired_cutoff",
    "pairwise_rmsd", "partial_plan", "plan_stats", "problems", "run", "sample_pairs",
    "train", "uot_plan", "violations", "weighted_fm_loss",
]
