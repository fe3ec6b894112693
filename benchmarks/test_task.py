r"""The fits of ``test_task`` beside statsmodels / numpy, side by side, same answers.

  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/test_task.py [--repeats=5] \
      [--bootstrap=1000]

On the paper's MMLU evaluations (53 models, fetched by ``core.datasets``; offline, a
generated stand-in of the same shape, said so in the output):

* hinge fit: ours (the 12,000-point grid vmapped, closed-form 2x2 normal equations, then the
  OLS summary at the best point, float64, compiled) against the reference the paper's
  numbers are checked with: ``numpy.linalg.lstsq`` at every grid point, then statsmodels'
  ``OLS(...).fit()`` (or a numpy closed form where statsmodels is not installed) at the best;
* appendix regression (with an intercept): ours against statsmodels' ``OLS``;
* bootstrap: B resamples of the models, c_e refitted for each: ours (vmapped in batches)
  against numpy (per resample, the grid's 2x2 systems solved batched, residuals explicit),
  on the same resample counts.

Runs alternate (ours, reference, ours, ...) after a warm-up, in this one process; each row
gives both medians (min-max), the per-pair ratio, and the largest difference of the answers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxlib_papers.core import datasets, timing  # noqa: E402
from jaxlib_papers.core.precision import enable_x64  # noqa: E402
from jaxlib_papers.test_task import data as data_lib  # noqa: E402
from jaxlib_papers.test_task import kernel  # noqa: E402

try:
  import statsmodels.api as sm  # noqa: E402
except ImportError:  # the reference falls back to numpy closed forms
  sm = None

GRID = 19.0 + 5e-4 * np.arange(12000)


def load(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
  """(log10 C, new, MMLU accuracy - chance, source) of the 53 models, or a stand-in."""
  try:
    table = data_lib.fetch_table()
    return (np.log10(table.compute), table.new, table.scores["mmlu_pre"] - 0.25,
            table.source)
  except datasets.DataUnavailable as e:
    rng = np.random.default_rng(seed)
    log_c = rng.uniform(20, 24, 53)
    new = (rng.uniform(size=53) < 0.36).astype(float)
    y = 0.24 * np.maximum(0, log_c - 22.1) + 0.07 * new + 0.04 * rng.normal(size=53)
    return log_c, new, y, f"generated stand-in (offline: {str(e)[:60]}...)"


def reference_ols(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(coefficients, standard errors): statsmodels when installed, else numpy."""
  if sm is not None:
    fit = sm.OLS(y, design).fit()
    return np.asarray(fit.params), np.asarray(fit.bse)
  coef = np.linalg.lstsq(design, y, rcond=None)[0]
  resid = y - design @ coef
  s2 = resid @ resid / (len(y) - design.shape[1])
  return coef, np.sqrt(np.diag(s2 * np.linalg.inv(design.T @ design)))


def reference_hinge(log_c, new, y):
  """lstsq at every grid point (first minimum), then the OLS summary at the best."""
  best = (np.inf, None)
  for c in GRID:
    x = np.c_[new, np.maximum(0.0, log_c - c)]
    if not x[:, 1].any():
      continue
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    sse = np.sum((y - x @ coef) ** 2)
    if sse < best[0]:
      best = (sse, c)
  coef, se = reference_ols(np.c_[new, np.maximum(0.0, log_c - best[1])], y)
  return best[1], coef[0], se[0]


def reference_bootstrap(log_c, new, y, counts):
  """theta per resample: batched 2x2 normal equations on the grid, explicit residuals."""
  hinge = np.maximum(0.0, log_c[None] - GRID[:, None])                    # [G, n]
  valid = hinge.any(axis=1)
  x = np.stack([np.broadcast_to(new, hinge.shape), hinge], -1)[valid]     # [G', n, 2]
  out = []
  for w in counts:
    gram = np.einsum("gnk,n,gnl->gkl", x, w, x)
    singular = np.linalg.det(gram) <= 1e-12 * gram[:, 0, 0] * gram[:, 1, 1]
    gram[singular] = np.eye(2)  # no fit there (every resampled model below the knot)
    coef = np.linalg.solve(gram, np.einsum("gnk,n->gk", x, w * y)[..., None])[..., 0]
    sse = np.einsum("n,gn->g", w, (y - np.einsum("gnk,gk->gn", x, coef)) ** 2)
    sse[singular] = np.inf
    out.append(coef[int(np.argmin(sse)), 0])
  return np.asarray(out)


def side_by_side(name, what, ours, reference, repeats):
  """Alternating timed calls; returns the row and both last outputs."""
  ours_s, ref_s = [], []
  ours_out = ref_out = None
  for _ in range(repeats):
    seconds, ours_out = timing.time_calls(ours, repeats=1)
    ours_s += seconds
    start = time.perf_counter()
    ref_out = reference()
    ref_s.append(time.perf_counter() - start)
  return ours_s, ref_s, ours_out, ref_out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--bootstrap", type=int, default=1000)
  args = parser.parse_args()
  log_c, new, y, source = load()
  print(f"data: {source}; reference: "
        f"{'statsmodels ' + sm.__version__ if sm else 'numpy (statsmodels not installed)'}")
  print(timing.machine_line())
  rows, costs = [], []
  with enable_x64():
    grid = jnp.asarray(GRID)
    hinge = lambda a, b, c: kernel.fit_hinge(a, b, c, jnp.ones_like(c), grid)
    fit = timing.compile_and_time(hinge, log_c, new, y, repeats=1)
    costs.append(timing.program_cost(hinge, log_c, new, y, compiled=fit.compiled))
    ours, ref, out, want = side_by_side(
        "hinge", "", lambda: fit.compiled(log_c, new, y),
        lambda: reference_hinge(log_c, new, y), args.repeats)
    diff = max(abs(float(out.emergence) - want[0]), abs(float(out.ols.coef[0]) - want[1]),
               abs(float(out.ols.se[0]) - want[2]))
    rows.append((*timing.side_by_side_row("hinge fit", "12k grid + OLS", ours, ref,
                                          fit.compile_seconds, 4), f"{diff:.1e}"))
    costs[-1] = (costs[-1], statistics.median(ours))
    design = np.asarray(kernel.segmented_features(log_c, new))
    ols = timing.compile_and_time(kernel.ols, design, y, repeats=1)
    costs.append(timing.program_cost(kernel.ols, design, y, compiled=ols.compiled))
    ours, ref, out, want = side_by_side("ols", "", lambda: ols.compiled(design, y),
                                        lambda: reference_ols(design, y), args.repeats)
    diff = max(np.max(np.abs(np.asarray(out.coef) - want[0])),
               np.max(np.abs(np.asarray(out.se) - want[1])))
    rows.append((*timing.side_by_side_row("appendix OLS", "53 x 5", ours, ref,
                                          ols.compile_seconds, 5), f"{diff:.1e}"))
    costs[-1] = (costs[-1], statistics.median(ours))
    settings = kernel.BootstrapSettings(num_samples=args.bootstrap)
    key = jax.random.key(0)
    bootstrap = lambda k, a, b, c: kernel.bootstrap_hinge(k, a, b, c, grid, settings)
    boot = timing.compile_and_time(bootstrap, key, log_c, new, y, repeats=1)
    costs.append(timing.program_cost(bootstrap, key, log_c, new, y, compiled=boot.compiled))
    counts = np.asarray(kernel.resample_counts(key, len(y), args.bootstrap))
    ours, ref, out, want = side_by_side(
        "bootstrap", "", lambda: boot.compiled(key, log_c, new, y),
        lambda: reference_bootstrap(log_c, new, y, counts), max(1, args.repeats // 2))
    diff = float(np.max(np.abs(np.asarray(out[0]) - want)))
    rows.append((*timing.side_by_side_row("bootstrap", f"B={args.bootstrap}, c_e refitted",
                                          ours, ref, boot.compile_seconds, 3), f"{diff:.1e}"))
    costs[-1] = (costs[-1], statistics.median(ours))
  # The peaks are float32 ones and these fits run in float64, whose matmul peak is lower: a
  # compute fraction here is a lower bound of the fraction of the float64 limit.
  timing.print_limit_table(
      ["fit", "what", "ours s", "compile s", "reference s", "reference / ours", "max diff"],
      [(row, cost, seconds) for row, (cost, seconds) in zip(rows, costs)])


if __name__ == "__main__":
  main()
