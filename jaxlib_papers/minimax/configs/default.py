"""LEN configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

The method needs no training loop: ``train.run`` runs every solver of the config on one
problem and writes ``results.json``.

* smoke: the cubic bilinear saddle at n = 10 (d = 20), seconds (tests, CI, the demo).
* cpu: n = 100 (d = 200), the official script's instance (seed 42), EG with eta 0.5 and 0.1,
  EG-2 (m = 1) and LEN with m = 10 and 100.
* full: n = 500 (d = 1000), m up to d.

Problem kinds: ``cubic_bilinear`` (``problem.n``) or ``fairness`` (``problem.data_file``:
a ``heart_scale`` libsvm file, or "" for the generated 270 x 12 stand-in).
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_BASE = dict(
    seed=42,                       # seed of b (cubic) / of the generated fairness data
    problem=dict(
        kind="cubic_bilinear",     # "cubic_bilinear" | "fairness"
        n=100,                     # cubic: sizes of x and y (d = 2n); rho = 1 / (20 n)
        data_file="",              # fairness: heart_scale path; "" = generated data
        lam=1e-4, gamma=1e-4, beta=0.5,
        rho=10.0,                  # fairness: the rho that sets M (official default)
    ),
    solve=dict(
        tol=1e-8,                  # stop at ||F(z_{t+1/2})|| <= tol
        max_iters=3000,            # LEN / EG-2 budget
        eg_max_iters=200_000,      # EG budget
        reg_factor=16.0 / 3.0,     # M = reg_factor * rho * m (official 16/3; theory >= 3)
        # "auto" (Hessenberg for the cubic saddle, Schur for fairness) | "schur" |
        # "hessenberg" (monotone problems) | "eig" | "dense" (O(d^3) per try, any backend)
        factorization="auto",
        root_rtol=1e-12,
    ),
    methods=dict(
        len_ms=(1, 10, 100),       # m = 1 is EG-2
        eg_etas=(0.5, 0.1),
    ),
)

_OVERRIDES = {
    "smoke": {
        "problem.n": 10, "methods.len_ms": (1, 5), "methods.eg_etas": (0.5,),
        "solve.eg_max_iters": 20_000, "solve.max_iters": 500,
    },
    "cpu": {},
    "full": {
        "problem.n": 500, "methods.len_ms": (1, 10, 100, 1000),
        "solve.eg_max_iters": 2_000_000,
    },
}


# What every key allows, checked when a config is built and again by the launcher (after
# command-line overrides), before anything is solved.
CONSTRAINTS = {
    "seed": C.at_least(0),
    "problem.kind": C.one_of("cubic_bilinear", "fairness"), "problem.n": C.at_least(0),
    "problem.data_file": C.existing_file(), "problem.lam": C.non_negative(),
    "problem.gamma": C.non_negative(), "problem.beta": C.non_negative(),
    "problem.rho": C.positive(),
    "solve.tol": C.positive(), "solve.max_iters": C.at_least(1),
    "solve.eg_max_iters": C.at_least(1), "solve.reg_factor": C.positive(),
    "solve.factorization": C.one_of("auto", "schur", "hessenberg", "eig", "dense"),
    "solve.root_rtol": C.positive(),
    "methods.len_ms": C.each(C.at_least(1)), "methods.eg_etas": C.each(C.positive(),
                                                                      non_empty=False),
}


def get_config(preset: str = "smoke"):
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
