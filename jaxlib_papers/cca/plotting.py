"""Figures shared by the reproduction check and the demo: sample grids and the trade-off."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.cca import data as data_lib
from jaxlib_papers.core import figures


def sample_grid(ax, images: np.ndarray, labels: np.ndarray, title: str,
                per_class: int = 6) -> None:
  """Draws ``per_class`` samples of each digit (rows: classes) on one axis.

  ``images``: [n, 64] intensities in [0, 16] (:func:`data.images` of sampled tokens).
  """
  rows = []
  for c in range(data_lib.NUM_CLASSES):
    picked = images[labels == c][:per_class].reshape(-1, 8, 8)
    pad = np.full((per_class - len(picked), 8, 8), 0)
    row = np.concatenate([picked, pad]) if len(picked) < per_class else picked
    rows.append(np.concatenate([np.pad(im, 1) for im in row], axis=1))
  ax.imshow(np.concatenate(rows, axis=0) / data_lib.MAX_INTENSITY, cmap="gray_r", vmin=0,
            vmax=1)
  ax.set_title(title, fontsize=8)
  ax.set_xticks([])
  ax.set_yticks([])


def tradeoff(ax, result) -> None:
  """Accuracy against diversity: the CFG curve (base, s) and the CCA lambda sweep.

  ``result``: a :class:`train.Result` (means and stds over seeds from its ``summary``).
  """
  stats = {row["setting"]: row for row in result.summary}
  cfg = ["base"] + [k for k in stats if k.startswith("cfg ")]
  cca = [k for k in stats if k.startswith("cca lambda=")]
  for names, marker, label in ((cfg, "o-", "CFG scale s"), (cca, "s-", "CCA lambda")):
    div = [stats[n]["diversity"] for n in names]
    acc = [stats[n]["accuracy"] for n in names]
    err = [stats[n]["accuracy_std"] for n in names]
    ax.errorbar(div, acc, yerr=err, fmt=marker, ms=4, capsize=2, label=label)
    for n, x, y in zip(names, div, acc):
      ax.annotate(n.split()[-1].replace("lambda=", "λ=").replace("base", "s=0"), (x, y),
                  fontsize=6, xytext=(2, 2), textcoords="offset points")
  ax.set_xlabel("diversity (within-class distance / real)")
  ax.set_ylabel("conditional accuracy (%)")
  ax.legend(fontsize=7)
  ax.invert_xaxis()


def figure(result, path=None, dpi: int = 80) -> Figure:
  """Sample grids (base, best CFG, main CCA, CCA + CFG) and the trade-off plot.

  ``result``: a :class:`train.Result` (its ``digits`` turn tokens back into images).
  """
  stats = {row["setting"]: row for row in result.summary}
  cfg = [k for k in stats if k.startswith("cfg ")]
  best_cfg = max(cfg, key=lambda k: stats[k]["accuracy"]) if cfg else "base"
  main = f"cca lambda={result.main_lambda:g}"
  both = [k for k in stats if k.startswith("cca+cfg")]
  shown = ["base", best_cfg, main] + both[:1]
  fig = Figure(figsize=(2.2 * (len(shown) + 1.6), 3.0), layout="tight")
  axes = fig.subplots(1, len(shown) + 1,
                      gridspec_kw={"width_ratios": [1] * len(shown) + [1.8]})
  for ax, name in zip(axes, shown):
    sample_grid(ax, data_lib.images(result.digits, result.samples[name][0]), result.labels,
                f"{name}\nacc {stats[name]['accuracy']:.0f}%")
  tradeoff(axes[-1], result)
  if path is not None:
    figures.save(fig, path, dpi=dpi)
  return fig


def toy_strength(lambdas, scales, path=None, dpi: int = 80) -> Figure:
  """The exact toy: the best-fit guidance scale s of CCA's optimum against lambda."""
  fig = Figure(figsize=(4, 2.6), layout="tight")
  ax = fig.subplots()
  ax.plot(lambdas, scales, "o-")
  ax.set_xlabel("lambda")
  ax.set_ylabel("best-fit guidance scale s")
  ax.set_title("toy: guidance strength rises with lambda", fontsize=9)
  if path is not None:
    figures.save(fig, path, dpi=dpi)
  return fig
