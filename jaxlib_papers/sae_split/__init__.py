"""Similarity-aware train/test splits for drug-target affinity (SAE; Zhang et al., ICLR 2025).

A random split leaves the test set dominated by molecules very similar to the training set;
SAE relaxes test membership to W in [0, 1], reads each sample's max similarity to the
training set through a soft max, bins it softly and fits a target histogram under an
equality constraint on the test size (a Lagrangian, extragradient), then binarises. Pieces:

* ``kernel``: Tanimoto, the neighbour table (row blocks), the relaxation
  (``soft_readout``, ``soft_histogram``, ``relaxed_loss``, ``lagrangian``), the solver
  (``SolverState``, ``init_state``, ``extragradient_step``, ``solve``) and binarisation.
* ``splitter``: ``SimilarityHistogramSplit`` (scikit-learn style ``split(X)``, also on a
  precomputed similarity), ``optimise_split``.
* ``data``: the official CSVs, RDKit Morgan fingerprints, a generated stand-in.
* ``evaluate``: exact readouts, baselines (random, scaffold, Butina), ridge / kNN, R^2 per bin.
* ``train.run(config, workdir)``: the experiment as a typed ``RunResult``; ``plotting``.
"""

from jaxlib_papers.sae_split import configs, data, evaluate, kernel, splitter, train
from jaxlib_papers.sae_split.configs import default as _default  # noqa: F401
from jaxlib_papers.sae_split.kernel import (
    Problem,
    Settings,
    SolverState,
    Target,
    extragradient_step,
    init_state,
    lagrangian,
    make_target,
    neighbour_table,
    relaxed_loss,
    soft_histogram,
    soft_readout,
    solve,
    tanimoto,
)
from jaxlib_papers.sae_split.splitter import SimilarityHistogramSplit, SplitResult
from jaxlib_papers.sae_split.train import RunResult, run

__all__ = [
    "Problem", "RunResult", "Settings", "SimilarityHistogramSplit", "SolverState",
    "SplitResult", "Target", "configs", "data", "evaluate", "extragradient_step",
    "init_state", "kernel", "lagrangian", "make_target", "neighbour_table", "relaxed_loss",
    "run", "soft_histogram", "soft_readout", "solve", "splitter", "tanimoto", "train",
]
