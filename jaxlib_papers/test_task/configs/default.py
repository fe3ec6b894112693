"""Training on the test task: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

No training loop on the paper's data: ``train.run`` fits the paper's evaluations (fetched
files, or a folder in the upstream layout) and trains the generated toy's models.

* smoke: bootstrap B = 100, the toy with 2 seeds and small models (seconds).
* cpu: bootstrap B = 1000 (the brief's), the toy with 5 seeds at the brief's sizes.
* full: the same fits (they are cheap); the toy with 20 seeds.

``data.source``: "official" (the 337 files through ``core.datasets``), "folder" (``data.folder``
laid out like the upstream repository, e.g. a clone of it) or "toy" (generated only).
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_BASE = dict(
    seed=0,                        # bootstrap key; the toy's seeds are seed, seed + 1, ...
    data=dict(
        source="official",         # "official" | "folder" | "toy"
        folder="",                 # source="folder": holds notebooks/utils.py, evaluations/
        mmlu_metric="mean_all",    # "mean_all" (the paper's code) | "aggregate" (lm-eval's)
    ),
    analysis=dict(
        post="max",                # "max": max(base, fine-tuned) as the code; "ft"
        grid=(19.0, 25.0, 5e-4),   # log10 c_e grid of the confound fit: low, high, step
        emergence_grid=(19.5, 24.0, 5e-4),
        bootstrap_samples=1000,    # B, resamples of the models (0: none)
        bootstrap_batch=50,        # resamples vmapped at once
    ),
    toy=dict(
        num_seeds=5,
        num_models=48,
        input_dim=32,
        new_every=3,               # every third model is newer
        task_fraction=0.3,         # share of a newer model's pretraining labels from the task
        shift=2.0,                 # task direction t = a + shift c
        log2_width=(3.0, 9.0),     # N = 2^U(.) random ReLU features
        log2_examples=(7.0, 13.0),  # D = 2^U(.) pretraining examples
        ridge=1e-2,
        finetune_examples=2048,
        finetune_ridge=1.0,
        test_examples=4096,
        batch_size=6,               # models vmapped at once (cells of 12 at 48 models)
        dtype="float64",           # float32's Gram loses the ridge's small eigenvalues
    ),
)

_OVERRIDES = {
    "smoke": {
        "analysis.bootstrap_samples": 100, "toy.num_seeds": 2,
        "toy.log2_width": (3.0, 6.0), "toy.log2_examples": (6.0, 10.0),
        "toy.finetune_examples": 512, "toy.test_examples": 1024, "toy.batch_size": 12,
    },
    "cpu": {},
    "full": {"toy.num_seeds": 20},
}


def _grid_spec():
  return C.Constraint(lambda v: len(v) == 3 and v[0] < v[1] and v[2] > 0
                      and (v[1] - v[0]) / v[2] <= 1e6,
                      "(low, high, step) with low < high, step > 0, <= 1e6 points")


def _log2_range(top: float):
  return C.Constraint(lambda v: len(v) == 2 and 0 <= v[0] <= v[1] <= top,
                      f"(low, high) with 0 <= low <= high <= {top}")


CONSTRAINTS = {
    "seed": C.at_least(0),
    "data.source": C.one_of("official", "folder", "toy"),
    "data.mmlu_metric": C.one_of("mean_all", "aggregate"),
    "analysis.post": C.one_of("max", "ft"),
    "analysis.grid": _grid_spec(), "analysis.emergence_grid": _grid_spec(),
    "analysis.bootstrap_samples": C.at_least(0), "analysis.bootstrap_batch": C.at_least(1),
    "toy.num_seeds": C.at_least(1), "toy.num_models": C.at_least(6),
    "toy.input_dim": C.at_least(2), "toy.new_every": C.at_least(2),
    "toy.task_fraction": C.in_range(0.0, 1.0, low_open=True), "toy.shift": C.positive(),
    "toy.log2_width": _log2_range(14.0), "toy.log2_examples": _log2_range(16.0),
    "toy.ridge": C.positive(), "toy.finetune_examples": C.at_least(1),
    "toy.finetune_ridge": C.positive(), "toy.test_examples": C.at_least(1),
    "toy.batch_size": C.at_least(1), "toy.dtype": C.one_of("float32", "float64"),
}


def get_config(preset: str = "smoke"):
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
