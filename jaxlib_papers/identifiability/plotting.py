"""Every figure of the package, for the reproduction check and the Colab demo.

Panel functions draw on a given ``Axes``; the figure functions return ``core.figures``
figures (``reproduce.py`` saves them, the notebook shows them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxlib_papers.core import figures


def learning_curves(ax, runs: Mapping[str, Any]) -> None:
  """In-batch R^2 of z from f(x) against optimiser steps, one line per program.

  Args:
    ax: the axes.
    runs: ``{name: train.VmfResult}``.
  """
  for name, result in runs.items():
    hist = result.history
    if not hist:
      continue
    ax.plot([row["step"] for row in hist], [row["r2_batch"] for row in hist], label=name)
  ax.set_xlabel("optimiser steps")
  ax.set_ylabel("in-batch R$^2$(z | f(x))")
  ax.set_ylim(0.0, 1.02)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)


def r2_bars(ax, entries: Mapping[str, Mapping[str, float]]) -> None:
  """Held-out R^2 of z: trained encoder, raw x and untrained encoder per setting.

  Args:
    ax: the axes.
    entries: ``{label: summary entry}`` (``train.VmfResult.summary`` rows).
  """
  names = list(entries)
  width = 0.27
  pos = np.arange(len(names))
  for i, (key, label) in enumerate((("r2_z", "trained f"), ("r2_x", "raw x"),
                                    ("r2_z_untrained", "untrained f"))):
    means = [entries[n][key] for n in names]
    stds = [entries[n].get(key + "_std", 0.0) for n in names]
    ax.bar(pos + (i - 1) * width, means, width, yerr=stds, label=label)
  ax.set_xticks(pos)
  ax.set_xticklabels(names, fontsize=7, rotation=20)
  ax.set_ylabel("held-out R$^2$(z)")
  ax.set_ylim(0.0, 1.05)
  ax.legend(fontsize=7)


def sprites_bars(ax, r: Mapping[str, np.ndarray], factors) -> None:
  """Pearson r of decoded sprite factors (mean over seeds) per representation.

  Args:
    ax: the axes.
    r: ``{"pixels" | "untrained" | "trained": [S, q]}``.
    factors: the q factor names.
  """
  width = 0.27
  pos = np.arange(len(factors))
  for i, key in enumerate(("pixels", "untrained", "trained")):
    values = np.asarray(r[key])
    ax.bar(pos + (i - 1) * width, values.mean(0), width, yerr=values.std(0), label=key)
  ax.set_xticks(pos)
  ax.set_xticklabels(factors, fontsize=8)
  ax.set_ylabel("Pearson r (validation)")
  ax.set_ylim(0.0, 1.05)
  ax.legend(fontsize=7)


def summary_figure(vmf: Mapping[str, Any], sprites: Any = None):
  """The reproduction check's figure: learning curves, R^2 bars, sprites decoding.

  Args:
    vmf: ``{program: train.VmfResult}``.
    sprites: a ``train.SpritesResult`` (a third panel) or None.
  """
  fig, axes = figures.new_figure(1, 3 if sprites is not None else 2, size=(4.2, 3.2))
  learning_curves(axes[0], vmf)
  bars = {f"{k} k={e['kappa']:g}" + (" oW" if e["normalize_head"] else ""): e
          for k, v in vmf.items() for e in v.summary}
  r2_bars(axes[1], bars)
  if sprites is not None:
    sprites_bars(axes[2], sprites.r, sprites.factors)
  return fig


def decoding_figure(result: Any):
  """The sprites decoding bars of a ``train.SpritesResult`` (the launcher's figure)."""
  fig, ax = figures.new_figure(1, 1, size=(4.2, 3.2))
  sprites_bars(ax, result.r, result.factors)
  return fig


def readout_figure(sup: Any, diet: Any, z: np.ndarray, pred: np.ndarray,
                   pred_x: np.ndarray):
  """The demo's figure: held-out z_1 against its linear prediction, curves, R^2 bars.

  Args:
    sup, diet: the supervised and DIET ``train.VmfResult``.
    z: [n, d] held-out latents; pred: [n, d] predicted from f(x); pred_x: [n, d] from x.
  """
  fig, axes = figures.new_figure(1, 3, size=(3.4, 3.0))
  axes[0].scatter(z[:, 0], pred_x[:, 0], s=2, alpha=0.4, label="from raw x")
  axes[0].scatter(z[:, 0], pred[:, 0], s=2, alpha=0.4, label="from f(x)")
  axes[0].plot([-1, 1], [-1, 1], "k--", lw=0.8)
  axes[0].set_xlabel("z_1 (held out)")
  axes[0].set_ylabel("linear prediction")
  axes[0].legend(fontsize=7, markerscale=4)
  learning_curves(axes[1], {"supervised": sup, "DIET": diet})
  r2_bars(axes[2], {"supervised": sup.summary[0], "DIET": diet.summary[0]})
  return fig


def sprites_figure(images: np.ndarray, result: Any):
  """A strip of rendered sprites and the decoding bars of a ``train.SpritesResult``.

  Args:
    images: [m, h, w] sprites to show side by side.
    result: the ``train.SpritesResult``.
  """
  fig, axes = figures.new_figure(1, 2, size=(4.0, 2.8))
  axes[0].imshow(np.concatenate(list(images), 1), cmap="gray")
  axes[0].axis("off")
  sprites_bars(axes[1], result.r, result.factors)
  return fig
