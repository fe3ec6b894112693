"""Figures shared by the reproduction check and the demo: sample grids and the trade-off."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.cca import data as data_lib
from jaxlib_papers.core import figures


def sample_grid(ax, tokens: np.ndarray, labels: np.ndarray, levels: int, title: str,
                per_class: int = 6) -> None:
  """Draws ``per_class`` samples of each digit (rows: classes) on one axis."""
  rows = []
  for c in range(data_lib.NUM_CLASSES):
    picked = tokens[labels == c][:per_class].reshape(-1, 8, 8)
    pad = np.full((per_class - len(picked), 8, 8), 0)
    row = np.concatenate([picked, pad]) if len(picked) < per_class else picked
    rows.append(np.concatenate([np.pad(im, 1) for im in row], axis=1))
  ax.imshow(np.concatenate(rows, axis=0) / (levels - 1), cmap="gray_r", vmin=0, vmax=1)
  ax.set_title(title, fontsize=8)
  ax.set_xticks([])
  ax.set_yticks([])


def tradeoff(ax, result: dict) -> None:
  """Accuracy against diversity: the CFG curve (base, s) and the CCA lambda sweep."""
  metrics = result["metrics"]
  cfg = ["base"] + [k for k in metrics if k.startswith("cfg ")]
  cca = [k for k in metrics if k.startswith("cca lambda=")]
  for names, marker, label in ((cfg, "o-", "CFG scale s"), (cca, "s-", "CCA lambda")):
    div = [np.mean(metrics[n]["diversity"]) for n in names]
    acc = [np.mean(metrics[n]["accuracy"]) for n in names]
    err = [np.std(metrics[n]["accuracy"]) for n in names]
    ax.errorbar(div, acc, yerr=err, fmt=marker, ms=4, capsize=2, label=label)
    for n, x, y in zip(names, div, acc):
      ax.annotate(n.split()[-1].replace("lambda=", "λ=").replace("base", "s=0"), (x, y),
                  fontsize=6, xytext=(2, 2), textcoords="offset points")
  ax.set_xlabel("diversity (within-class distance / real)")
  ax.set_ylabel("conditional accuracy (%)")
  ax.legend(fontsize=7)
  ax.invert_xaxis()


def figure(result: dict, levels: int, path=None, dpi: int = 80):
  """Sample grids (base, best CFG, main CCA, CCA + CFG) and the trade-off plot."""
  metrics, samples, labels = result["metrics"], result["samples"], result["labels"]
  cfg = [k for k in metrics if k.startswith("cfg ")]
  best_cfg = max(cfg, key=lambda k: np.mean(metrics[k]["accuracy"])) if cfg else "base"
  main = f"cca lambda={result['main_lambda']:g}"
  both = [k for k in metrics if k.startswith("cca+cfg")]
  shown = ["base", best_cfg, main] + both[:1]
  fig = Figure(figsize=(2.2 * (len(shown) + 1.6), 3.0), layout="tight")
  axes = fig.subplots(1, len(shown) + 1,
                      gridspec_kw={"width_ratios": [1] * len(shown) + [1.8]})
  for ax, name in zip(axes, shown):
    acc = np.mean(metrics[name]["accuracy"])
    sample_grid(ax, samples[name][0], labels, levels, f"{name}\nacc {acc:.0f}%")
  tradeoff(axes[-1], result)
  if path is not None:
    figures.save(fig, path, dpi=dpi)
  return fig
