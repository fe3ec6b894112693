"""The paper's four analyses of a :class:`data.ModelTable`, as typed results (float64).

Per benchmark (MMLU with chance r = 0.25, GSM8K with r = 0), over the models that have both
a base and a fine-tuned score:

* the confound fit A - r = theta N + alpha max(0, log10 C - c_e) before ("pre") and after
  ("post") fine-tuning on the task data, c_e refitted each time (``kernel.fit_hinge``); post
  is max(base, fine-tuned) per model as the paper's code scores it (``post="ft"``: the
  fine-tuned score alone); a bootstrap over models refits c_e too;
* the appendix regressions with an intercept: psi (N's coefficient for y = post) and phi
  (for y = pre - post, the effect that goes through training on the test task);
* the Pareto-front areas between all models and the older ones, pre and post;
* the emergence point of the older models (1e20 < C < 1e24) at each fine-tuning budget.

``analyse(table, settings)`` runs one jitted program per benchmark size.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.test_task import data as data_lib
from jaxlib_papers.test_task import kernel

BENCHMARKS = ("mmlu", "gsm8k")


class AnalysisSettings(NamedTuple):
  """How the fits are run (the defaults are the paper's, with the brief's grids)."""
  grid: tuple[float, float, float] = (19.0, 25.0, 5e-4)       # c_e grid: low, high, step
  emergence_grid: tuple[float, float, float] = (19.5, 24.0, 5e-4)
  emergence_compute: tuple[float, float] = (1e20, 1e24)       # older models in this range
  post: str = "max"              # "max": max(base, fine-tuned) as the code; "ft": fine-tuned
  bootstrap_samples: int = 1000  # B (0: no bootstrap)
  bootstrap_batch: int = 50      # samples vmapped at once
  seed: int = 0                  # the bootstrap's key


@dataclasses.dataclass(frozen=True)
class Fit:
  """One confound fit: N's coefficient theta and the hinge."""
  theta: float
  se: float
  p: float
  ci_low: float          # 95% t interval
  ci_high: float
  alpha: float           # slope of the hinge, per decade of compute
  log10_emergence: float  # c_e
  r2_uncentered: float   # what the paper reports (no intercept)
  r2_centered: float
  boot_low: float        # 2.5% / 97.5% percentiles of theta over the bootstrap (NaN: none)
  boot_high: float


@dataclasses.dataclass(frozen=True)
class Coefficient:
  """N's coefficient in an appendix regression (with an intercept)."""
  coef: float
  se: float
  p: float
  r2_centered: float


@dataclasses.dataclass(frozen=True)
class BenchmarkResult:
  """Every analysis of one benchmark."""
  benchmark: str
  n: int                      # models with base and fine-tuned scores
  num_new: int
  chance: float
  pre: Fit
  post: Fit                   # as settings.post says
  post_ft_only: Fit           # fine-tuned score alone (no max)
  psi: Coefficient            # y = post
  phi: Coefficient            # y = pre - post
  pareto_pre: float
  pareto_post: float
  emergence: dict[str, float]  # "k=<examples>" -> log10 c_e of the older models
  emergence_n: dict[str, int]  # models in each emergence fit


def _grid(spec) -> jax.Array:
  return kernel.emergence_grid(*spec)


@functools.partial(jax.jit, static_argnames=("settings",))
def _confound_program(arrays: dict, key: jax.Array, settings: AnalysisSettings) -> dict:
  """Everything of one benchmark but the emergence fits (one compiled program per n).

  The three confound fits (pre, post, fine-tuned alone) are one vmapped fit, the two
  bootstraps one vmapped bootstrap and psi, phi one vmapped OLS: XLA compiles each once.
  """
  grid = _grid(settings.grid)
  log_c, new = arrays["log_compute"], arrays["new"]
  ys = jnp.stack([arrays[name] for name in ("pre", "post", "ft")]) - arrays["chance"]
  out = {"hinge": jax.vmap(lambda y: kernel.fit_hinge(
      log_c, new, y, jnp.ones_like(y), grid, arrays["critical"][0]))(ys)}
  if settings.bootstrap_samples:
    boot = kernel.BootstrapSettings(settings.bootstrap_samples, settings.bootstrap_batch)
    thetas, _ = jax.vmap(lambda y: kernel.bootstrap_hinge(key, log_c, new, y, grid, boot))(
        ys[:2])
    out["boot"] = jnp.percentile(thetas, jnp.array([2.5, 97.5]), axis=1).T  # [2, 2]
  design = kernel.segmented_features(log_c, new)
  out["appendix"] = jax.vmap(lambda y: kernel.ols(design, y, None, arrays["critical"][1]))(
      jnp.stack([arrays["post"], arrays["pre"] - arrays["post"]]))
  out["pareto"] = jax.vmap(lambda a: kernel.pareto_area(log_c, a, new))(
      jnp.stack([arrays["pre"], arrays["post"]]))
  return out


@functools.partial(jax.jit, static_argnames=("grid_spec",))
def _emergence_program(log_compute: jax.Array, scores: jax.Array, weights: jax.Array,
                       chance: jax.Array, grid_spec: tuple) -> kernel.EmergenceFit:
  """c_e of each column of ``scores`` [K, n] (weights [K, n] select the models)."""
  grid = _grid(grid_spec)
  return jax.vmap(lambda a, w: kernel.fit_emergence(log_compute, a - chance, w, grid))(
      scores, weights)


def _fit(hinge: kernel.HingeFit, boot=None) -> Fit:
  o = hinge.ols
  low, high = (np.nan, np.nan) if boot is None else (float(boot[0]), float(boot[1]))
  return Fit(theta=float(o.coef[0]), se=float(o.se[0]), p=float(o.p[0]),
             ci_low=float(o.ci_low[0]), ci_high=float(o.ci_high[0]), alpha=float(o.coef[1]),
             log10_emergence=float(hinge.emergence), r2_uncentered=float(o.r2_uncentered),
             r2_centered=float(o.r2_centered), boot_low=low, boot_high=high)


def _coefficient(fit: kernel.OLSFit) -> Coefficient:
  return Coefficient(coef=float(fit.coef[1]), se=float(fit.se[1]), p=float(fit.p[1]),
                     r2_centered=float(fit.r2_centered))


def check_table(table: data_lib.ModelTable, benchmark: str) -> None:
  """Raises ValueError naming what is wrong with ``table`` for ``benchmark``."""
  if benchmark not in BENCHMARKS:
    raise ValueError(f"benchmark must be one of {BENCHMARKS}, got {benchmark!r}")
  for column in (f"{benchmark}_pre", f"{benchmark}_ft"):
    if column not in table.scores:
      raise ValueError(f"table.scores lacks the column {column!r}")
  if not np.all(np.isfinite(table.compute) & (table.compute > 0)):
    raise ValueError("table.compute must be finite and > 0 for every model")
  if not set(np.unique(table.new)) <= {0.0, 1.0}:
    raise ValueError("table.new must hold 0 or 1 for every model")


def emergence_columns(table: data_lib.ModelTable, benchmark: str) -> dict[str, str]:
  """``{"k=<examples>": score column}``: k = 0 (base), then each intermediate step."""
  out = {"k=0": f"{benchmark}_pre"}
  for step in data_lib.STEPS[benchmark]:
    if f"{benchmark}_s{step}" in table.scores:
      out[f"k={data_lib.EXAMPLES_PER_STEP * step}"] = f"{benchmark}_s{step}"
  return out


def emergence_fits(table: data_lib.ModelTable, benchmark: str,
                   settings: AnalysisSettings = AnalysisSettings()
                   ) -> tuple[dict[str, float], dict[str, int]]:
  """log10 c_e of the older models in the compute range, per fine-tuning budget."""
  columns = emergence_columns(table, benchmark)
  low, high = settings.emergence_compute
  in_range = (table.new == 0) & (table.compute > low) & (table.compute < high)
  scores = np.stack([table.scores[c] for c in columns.values()])
  weights = (in_range[None] & np.isfinite(scores)).astype(np.float64)
  with enable_x64():
    fits = _emergence_program(jnp.log10(table.compute), jnp.nan_to_num(scores),
                              jnp.asarray(weights), jnp.float64(data_lib.CHANCE[benchmark]),
                              tuple(settings.emergence_grid))
    emergence = np.asarray(fits.emergence)
  return ({k: float(v) for k, v in zip(columns, emergence)},
          {k: int(v) for k, v in zip(columns, weights.sum(axis=1))})


def analyse_benchmark(table: data_lib.ModelTable, benchmark: str,
                      settings: AnalysisSettings = AnalysisSettings()) -> BenchmarkResult:
  """Every analysis of ``benchmark`` ("mmlu" or "gsm8k") on ``table``."""
  check_table(table, benchmark)
  if settings.post not in ("max", "ft"):
    raise ValueError(f"settings.post must be 'max' or 'ft', got {settings.post!r}")
  pre, ft = table.scores[f"{benchmark}_pre"], table.scores[f"{benchmark}_ft"]
  keep = np.isfinite(pre) & np.isfinite(ft)  # the models with both scores
  if keep.sum() < 5 or not 0 < table.new[keep].sum() < keep.sum():
    raise ValueError(f"{benchmark}: need >= 5 models with both scores, newer and older "
                     f"ones; got {int(keep.sum())} ({int(table.new[keep].sum())} newer)")
  post = np.maximum(pre, ft) if settings.post == "max" else ft
  with enable_x64():
    arrays = {"log_compute": jnp.log10(table.compute[keep]), "new": jnp.asarray(
        table.new[keep]), "pre": jnp.asarray(pre[keep]), "post": jnp.asarray(post[keep]),
              "ft": jnp.asarray(ft[keep]), "chance": jnp.float64(data_lib.CHANCE[benchmark]),
              # t_{0.975, df} of the confound fits (k = 2) and the appendix ones (k = 5)
              "critical": jnp.asarray(scipy.stats.t.ppf(0.975, keep.sum() - np.array([2, 5])))}
    out = jax.device_get(_confound_program(arrays, jax.random.key(settings.seed), settings))
  emergence, emergence_n = emergence_fits(table, benchmark, settings)
  member = lambda tree, i: jax.tree.map(lambda v: v[i], tree)  # noqa: E731
  boot = out.get("boot", [None, None])
  return BenchmarkResult(
      benchmark=benchmark, n=int(keep.sum()), num_new=int(table.new[keep].sum()),
      chance=data_lib.CHANCE[benchmark], pre=_fit(member(out["hinge"], 0), boot[0]),
      post=_fit(member(out["hinge"], 1), boot[1]), post_ft_only=_fit(member(out["hinge"], 2)),
      psi=_coefficient(member(out["appendix"], 0)),
      phi=_coefficient(member(out["appendix"], 1)),
      pareto_pre=float(out["pareto"][0]), pareto_post=float(out["pareto"][1]),
      emergence=emergence, emergence_n=emergence_n)


def analyse(table: data_lib.ModelTable, settings: AnalysisSettings = AnalysisSettings()
            ) -> dict[str, BenchmarkResult]:
  """``{benchmark: BenchmarkResult}`` for MMLU and GSM8K."""
  return {b: analyse_benchmark(table, b, settings) for b in BENCHMARKS}
