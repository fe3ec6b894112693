"""Figures of single_index, shared by the reproduction check and the demo (``core.figures``).

The figure every reader of this literature expects: samples to weak recovery n* against d on
log-log axes, one line per algorithm (median over seeds, the inter-quartile range as a band),
with the theory's slope drawn beside each through its first point.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures
from jaxlib_papers.single_index import train

_COLORS = {"vanilla": "tab:red", "smoothing": "tab:orange", "lt": "tab:blue",
           "lt_s": "tab:green"}


def _quartiles(hits) -> tuple[np.ndarray, np.ndarray]:
  values = np.where(np.asarray(hits) < 0, np.inf, np.asarray(hits)).astype(np.float64)
  return np.percentile(values, 25, axis=-1), np.percentile(values, 75, axis=-1)


def _theory_line(ax, xs, first, slope, color) -> None:
  if not np.isfinite(first):
    return
  xs = np.asarray(xs, np.float64)
  ax.plot(xs, first * (xs / xs[0]) ** slope, ls=":", color=color, lw=1)


def scaling_figure(cells: Sequence[train.CellResult], multiplier: float = 1.0) -> Figure:
  """n* against d per link (one panel each), every algorithm of ``cells`` at the step
  multiplier ``multiplier``; dotted: the theory's slope."""
  chosen = [c for c in cells if c.c_multiplier == multiplier]
  link_names = list(dict.fromkeys(c.link for c in chosen)) or ["-"]
  fig, axes = figures.new_figure(1, len(link_names), size=(4.2, 3.4), squeeze=False)
  for ax, link in zip(axes[0], link_names):
    for cell in (c for c in chosen if c.link == link):
      color = _COLORS.get(cell.algorithm, "k")
      median = np.asarray(cell.median, np.float64)
      low, high = _quartiles(cell.hits)
      ax.plot(cell.dims, median, "o-", color=color,
              label=f"{cell.algorithm} (p={cell.degree}): {cell.slope:.2f}"
                    f" [theory {cell.theory_slope:g}]")
      ax.fill_between(cell.dims, low, np.minimum(high, 10 * np.nanmax(
          np.where(np.isfinite(median), median, np.nan))), color=color, alpha=0.15)
      _theory_line(ax, cell.dims, median[0], cell.theory_slope, color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("dimension d")
    ax.set_ylabel("samples to |<w, theta*>| >= 0.5")
    ax.set_title(f"{link}: n* (median, IQR band); slope [theory]")
    ax.legend(fontsize=6.5)
  return fig


def sparse_figure(sparse: Sequence[train.SparseCellResult]) -> Figure:
  """Samples to support recovery against k, one line per (link, d); dotted: k^{s*}."""
  fig, ax = figures.new_figure(size=(5.0, 3.6))
  styles = ["o-", "s--", "^-.", "v:"]
  for s, color in zip(sparse, ("tab:blue", "tab:purple", "tab:green", "tab:red")):
    for i, d in enumerate(s.dims):
      median = np.asarray(s.median[i], np.float64)
      ax.plot(s.sparsities, median, styles[i % len(styles)], color=color,
              label=f"{s.link} d={d}: slope {s.slope_k[i]:.2f} [theory {s.degree}]")
    _theory_line(ax, s.sparsities, np.asarray(s.median[0], np.float64)[0], s.degree, color)
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("sparsity k")
  ax.set_ylabel("samples to top-k = support")
  ax.set_title("sparse: n* ~ k^{s*} log d")
  ax.legend(fontsize=7)
  return fig


def stage2_figure(stage2: train.Stage2Result) -> Figure:
  """Test MSE / Var(y) of the second layer per seed: learned w against a random w."""
  fig, ax = figures.new_figure(size=(4.5, 3.2))
  seeds = np.arange(len(stage2.mse_ratio))
  ax.bar(seeds - 0.2, stage2.mse_ratio, 0.4, label="learned w (stage 1)")
  ax.bar(seeds + 0.2, stage2.random_mse_ratio, 0.4, label="random w")
  ax.plot(seeds, stage2.expected_mse_ratio, "k_", ms=12, label="1 - m^{2k*}")
  ax.set_xlabel("seed")
  ax.set_ylabel("test MSE / Var(y)")
  ax.set_title(f"stage 2: {stage2.link}, d={stage2.dim}")
  ax.legend(fontsize=7)
  return fig
