"""sae_split configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

The experiment: per data set, the random / scaffold / Butina baselines and SAE's split
fitted to a target histogram of the test set's max-Tanimoto-to-train (``target.edges``,
``target.weights``), ``solver.num_seeds`` seeds vmapped in one compiled program, the best
binarisation kept; then a ridge and a Tanimoto kNN model trained on each split, R^2 per
similarity bin.

* ``solver.neighbours``: the readout's table, k most similar samples per row (0: every
  sample, the official dense readout; memory N^2). The table is exact for the binarised
  readout when every test row has a training sample among its k (checked, reported).
* smoke: a generated set of 400 vectors (seconds; tests, CI, the demo); cpu: EGFR at the
  brief's CPU plan (lr 0.1 for both players, 5k iterations, k = 128); full: all four sets
  at the official configuration (lr 1e-2, 20k iterations, dense readout; GPU).
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

# The official shipped lambdas (all sigmoid mode here: see seeds/sae_split.md).
SHIPPED_LAMBDA = {"IC50_EGFR": 2.03e-3, "IC50_BACE1": 4.38e-2,
                  "Ki_Carbonic_anhydrase_I": 2.15e-2, "Ki_Carbonic_anhydrase_II": 1.06e-2}

_BASE = dict(
    seed=0,
    data=dict(
        sets=("IC50_EGFR",),      # official names (data.DATASETS) or "generated"
        generated_size=400,       # N of the generated stand-in (offline, or "generated")
        # The solver on a generated set (0: solver.iterations / solver.num_seeds). Its low
        # bin is whole remote clusters, which lr 0.1 can reach only after a plateau of up
        # to ~15k iterations, on some seeds not at all (the cpu plan's 5k and 2 seeds were
        # measured on EGFR; seeds/sae_split.md).
        generated_iterations=0,
        generated_seeds=0,
    ),
    target=dict(
        edges=(0.0, 1 / 3, 2 / 3, 1.0),   # b_0..b_K in [0, 1]
        weights=(1 / 3, 1 / 3, 1 / 3),    # E_k, sum 1
        test_size=0.2,                    # a
        sigma=0.1,                        # s_k = sigma x bin width
    ),
    solver=dict(
        num_seeds=2,              # vmapped; the best score is kept
        iterations=5000,
        log_every=500,            # binarise and score every this many iterations
        lr=0.1, dual_lr=0.1,      # the brief's CPU plan (official: 1e-2 both)
        scale=100.0,              # s
        lam=-1.0,                 # entropy weight; < 0: the shipped value per set
        neighbours=128,           # k of the table (0: dense)
        init="custom",
        feasibility=0.05,         # keep-best among |sum W - aN| / aN <= this (< 0: off)
        block=512,                # rows per block of the table / exact readout
    ),
    baselines=dict(
        random_seeds=5,
        butina_cutoffs=(0.4, 0.6),   # Tanimoto distance thresholds
    ),
    model=dict(ridge=1.0, knn=5),
)

_OVERRIDES = {
    "smoke": {
        "data.sets": ("generated",), "solver.iterations": 400, "solver.log_every": 100,
        "solver.neighbours": 0, "baselines.random_seeds": 2,
    },
    "cpu": {"data.generated_size": 2000,    # offline: EGFR's generated stand-in, solved
            "data.generated_iterations": 20_000, "data.generated_seeds": 4},   # as at full
    "full": {
        "data.sets": ("IC50_EGFR", "IC50_BACE1", "Ki_Carbonic_anhydrase_I",
                      "Ki_Carbonic_anhydrase_II"),
        "solver.num_seeds": 4, "solver.iterations": 20_000, "solver.lr": 1e-2,
        "solver.dual_lr": 1e-2, "solver.neighbours": 0, "solver.feasibility": 0.01,
        "baselines.random_seeds": 20,
    },
}


def _sums_to_one() -> C.Constraint:
  return C.Constraint(
      lambda v: (len(v) > 0 and all(isinstance(x, (int, float)) and x >= 0 for x in v)
                 and abs(sum(v) - 1.0) <= 1e-6),
      "non-negative weights that sum to 1")


def _edges() -> C.Constraint:
  return C.Constraint(
      lambda v: (len(v) >= 2 and all(isinstance(x, (int, float)) and 0.0 <= x <= 1.0
                                     for x in v)
                 and all(a < b for a, b in zip(v[:-1], v[1:]))),
      "increasing bin edges in [0, 1]")


CONSTRAINTS = {
    "seed": C.at_least(0),
    "data.generated_size": C.at_least(20), "data.generated_iterations": C.at_least(0),
    "data.generated_seeds": C.at_least(0),
    "target.edges": _edges(), "target.weights": _sums_to_one(),
    "target.test_size": C.in_range(0.0, 1.0, low_open=True, high_open=True),
    "target.sigma": C.positive(),
    "solver.num_seeds": C.at_least(1), "solver.iterations": C.at_least(1),
    "solver.log_every": C.at_least(1), "solver.lr": C.positive(),
    "solver.dual_lr": C.non_negative(), "solver.scale": C.positive(),
    "solver.neighbours": C.at_least(0),
    "solver.feasibility": C.in_range(-1.0, 1.0),
    "solver.init": C.one_of("custom", "normal", "uniform"), "solver.block": C.at_least(1),
    "baselines.random_seeds": C.at_least(1),
    "baselines.butina_cutoffs": C.each(C.in_range(0.0, 1.0, low_open=True), non_empty=False),
    "model.ridge": C.positive(), "model.knn": C.at_least(1),
}


def get_config(preset: str = "smoke"):
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
