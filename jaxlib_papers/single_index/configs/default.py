"""single_index configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

The experiment: samples to weak recovery (|<w, theta*>| >= 0.5) of online spherical SGD on
fresh samples, per (link, algorithm, d), ``run.num_seeds`` seeds in one program; slopes of
log median n* against log d; the sparse variant's support selection; stage 2 (the second
layer on the learned direction).

* ``dense.cells``: "<link>_<algorithm>", algorithm one of ``vanilla`` (T = y / sd(y),
  p = k*), ``smoothing`` (as vanilla, lam = d^{1/4}), ``lt`` (the link's transform,
  p = s*), ``lt_s`` (the paper: p = s*, lam = d^{1/4} when s* >= 3); ``dense.dims.<cell>``
  the dimensions of a cell (default ``dense.dims.default``).
* ``steps``: eta = c d^{-e} and the sample cap C d^{f} per (degree p, smoothed): p = 1:
  c / d, cap 50 d; p = 2: c / d, 200 d; p = 3: c d^{-3/2}, 10 d^2; p = 4: c d^{-2}, 2 d^3;
  smoothed: c d^{-1/4}, 30 d^{3/2}. c is fixed once per (p, smoothed) and kept for every d
  (never tuned per d); ``dense.c_multipliers`` scales it (the full preset's grid).
* ``run.engine``: ``chain`` (the exact law of the alignment, O(1) per sample; kernel.py)
  or ``full`` (w in R^d).
* smoke: seconds (tests, CI, the demo); cpu: the reproduction check's sizes; full: the
  larger grid with 256 seeds sharded over the devices.
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

ALGORITHMS = ("vanilla", "smoothing", "lt", "lt_s")

_CELLS = ("he3_vanilla", "he3_smoothing", "he3_lt", "he4_vanilla", "he4_lt",
          "he4_smoothing", "bin3_vanilla", "bin3_lt_s")

_BASE = dict(
    seed=0,
    run=dict(
        num_seeds=32,             # R seeds per cell, vmapped (sharded over the devices)
        engine="chain",           # "chain" (exact alignment chain) | "full" (w in R^d)
        chunk=1000,               # fresh samples per seed per compiled loop step
        noise_std=0.1,            # label noise N(0, 0.1^2) (links with additive noise)
        thresholds=(0.5, 0.9),    # n* at the first; the run stops once all seeds reach it
        bootstrap=1000,           # resamples of the seeds for the slopes' intervals
    ),
    dense=dict(
        cells=_CELLS,
        c_multipliers=(1.0,),
        dims=dict(default=(32, 64, 128, 256), he3_vanilla=(32, 64, 128),
                  he4_vanilla=(16, 32, 64), he4_smoothing=(32, 64, 128),
                  bin3_vanilla=(32, 64, 128)),
    ),
    steps=dict(
        eta_p1=0.2, eta_p2=0.3, eta_p3=2.0, eta_p4=1.0, eta_smoothed=0.1,
        cap_p1=50.0, cap_p2=200.0, cap_p3=10.0, cap_p4=2.0, cap_smoothed=30.0,
    ),
    sparse=dict(
        links=("he3", "he4"),
        dims=(256, 1024),
        sparsities=(4, 8, 16),
        max_sparsity=dict(he3=16, he4=8),   # k above it is skipped for that link
        num_seeds=32,             # R of the selection (O(n d) per sample: fewer than dense)
        # Checkpoints 32 x 1.05^j (the brief: x 1.15, whose 15% steps quantise a two-point
        # slope in log k by 0.2, half the claim's tolerance; seeds/single_index.md).
        chunk=16, first_checkpoint=32, growth=1.05, cap=60_000,
    ),
    stage2=dict(
        enabled=True, link="he3", dim=64, num_seeds=8,
        eta=0.2,                  # phase 1: LT (p = s* = 1), eta = 0.2 / d, to m >= 0.5
        decay=5.0,                # phase 2: eta_t = (0.2 / d) * 5d / (5d + t), to m >= .99
        target=0.99, cap=2000.0,  # phase caps: cap * d samples
        num_features=256, num_train=8000, num_test=20000, ridge=1e-3,
    ),
)

_OVERRIDES = {
    "smoke": {
        "run.num_seeds": 8, "run.chunk": 250, "run.bootstrap": 100,
        "dense.cells": ("he3_lt", "bin3_lt_s"),
        "dense.dims.default": (16, 32),
        "sparse.links": ("he3",), "sparse.dims": (64,), "sparse.sparsities": (2, 4),
        "sparse.num_seeds": 8,
        "sparse.cap": 4000,
        "stage2.dim": 16, "stage2.num_seeds": 4, "stage2.num_train": 2000,
        "stage2.num_test": 4000, "stage2.num_features": 64,
    },
    "cpu": {"run.num_seeds": 128, "sparse.num_seeds": 64},
    "full": {
        "run.num_seeds": 256,
        "dense.c_multipliers": (0.25, 0.5, 1.0, 2.0, 4.0),
        "dense.dims.default": (32, 64, 128, 256, 512, 1024),
        "dense.dims.he3_vanilla": (32, 64, 128, 256, 512),
        "dense.dims.he4_vanilla": (16, 32, 64, 128),
        "dense.dims.he4_smoothing": (32, 64, 128, 256, 512, 1024),
        "dense.dims.bin3_vanilla": (32, 64, 128, 256, 512),
        "sparse.dims": (256, 1024, 4096, 16384), "sparse.sparsities": (4, 8, 16, 32),
        "sparse.max_sparsity.he3": 32, "sparse.max_sparsity.he4": 16,
        "sparse.cap": 400_000, "sparse.num_seeds": 256, "stage2.num_seeds": 32,
    },
}


def _dims() -> C.Constraint:
  return C.each(C.at_least(4))


# What every key allows, checked when a config is built and again by train.run (after
# command-line overrides), before anything compiles.
CONSTRAINTS = {
    "seed": C.at_least(0),
    "run.num_seeds": C.at_least(1), "run.engine": C.one_of("chain", "full"),
    "run.chunk": C.at_least(1), "run.noise_std": C.non_negative(),
    "run.thresholds": C.each(C.in_range(0.0, 1.0, low_open=True)),
    "run.bootstrap": C.at_least(0),
    "dense.cells": C.each(C.Constraint(lambda v: isinstance(v, str) and "_" in v,
                                       "a '<link>_<algorithm>' name"), non_empty=False),
    "dense.c_multipliers": C.each(C.positive()),
    "dense.dims.default": _dims(),
    "steps.eta_p1": C.positive(), "steps.eta_p2": C.positive(), "steps.eta_p3": C.positive(),
    "steps.eta_p4": C.positive(), "steps.eta_smoothed": C.positive(),
    "steps.cap_p1": C.positive(), "steps.cap_p2": C.positive(), "steps.cap_p3": C.positive(),
    "steps.cap_p4": C.positive(), "steps.cap_smoothed": C.positive(),
    "sparse.dims": C.each(C.at_least(4), non_empty=False),
    "sparse.sparsities": C.each(C.at_least(1), non_empty=False),
    "sparse.num_seeds": C.at_least(1), "sparse.chunk": C.at_least(1),
    "sparse.first_checkpoint": C.at_least(1),
    "sparse.growth": C.in_range(1.0, 10.0, low_open=True), "sparse.cap": C.at_least(1),
    "stage2.dim": C.at_least(4), "stage2.num_seeds": C.at_least(1),
    "stage2.eta": C.positive(), "stage2.decay": C.positive(),
    "stage2.target": C.in_range(0.0, 1.0, low_open=True, high_open=True),
    "stage2.cap": C.positive(), "stage2.num_features": C.at_least(1),
    "stage2.num_train": C.at_least(1), "stage2.num_test": C.at_least(2),
    "stage2.ridge": C.positive(),
}


def get_config(preset: str = "smoke"):
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
