"""Figures of sae_split, shared by the reproduction check and the demo (``core.figures``).

* :func:`histogram_figure`: the test set's max-similarity-to-train histogram under each
  split (random, scaffold, SAE) beside the target counts.
* :func:`r2_figure`: R^2 per similarity bin of ridge and kNN on the random and SAE splits.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures
from jaxlib_papers.sae_split import evaluate, train


def histogram_figure(result: train.RunResult, index: int = 0) -> Figure:
  """Test counts per bin of each split of set ``index``, the target as a black step."""
  data_set = result.sets[index]
  edges = np.asarray(result.edges)
  target = np.asarray(result.weights) * data_set.num_test
  names = [n for n in ("random", "scaffold", "sae") if n in data_set.readouts]
  fig, axes = figures.new_figure(1, len(names), size=(3.4, 3.0), squeeze=False)
  for ax, name in zip(axes[0], names):
    found = evaluate.counts(np.asarray(data_set.readouts[name]), edges)
    ax.bar(edges[:-1], found, width=np.diff(edges), align="edge", alpha=0.6,
           edgecolor="k", label=name)
    ax.stairs(target, edges, color="k", lw=2, label="target")
    ax.set_title(f"{data_set.name}: {name} {found.tolist()}", fontsize=8)
    ax.set_xlabel("max Tanimoto to train")
  axes[0][0].set_ylabel("test molecules")
  axes[0][0].legend(fontsize=7)
  return fig


def r2_figure(result: train.RunResult, index: int = 0) -> Figure:
  """R^2 per bin (mean over the random seeds; SAE's one split), ridge and kNN."""
  data_set = result.sets[index]
  fig, axes = figures.new_figure(1, 2, size=(3.6, 3.0), squeeze=False)
  bins = np.arange(len(result.weights))
  for ax, model in zip(axes[0], ("ridge", "knn")):
    for shift, split in ((-0.2, "random"), (0.2, "sae")):
      rows = np.array([m.r2_per_bin for m in data_set.models
                       if m.model == model and m.split == split], np.float64)
      ax.bar(bins + shift, np.clip(np.nanmean(rows, 0), -2, 1), width=0.4, label=split)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(bins, [f"{a:.2f}-{b:.2f}" for a, b in zip(result.edges[:-1],
                                                            result.edges[1:])], fontsize=7)
    ax.set_title(f"{data_set.name}: {model} R^2 per bin (clipped at -2)", fontsize=8)
  axes[0][0].legend(fontsize=7)
  return fig
