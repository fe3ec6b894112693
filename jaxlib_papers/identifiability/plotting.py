"""Figures shared by the reproduction check and the Colab demo."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def learning_curves(ax, runs: Mapping[str, Mapping[str, Any]]) -> None:
  """In-batch R^2 of z from f(x) against optimiser steps, one line per program."""
  for name, results in runs.items():
    hist = results["history"]
    if not hist:
      continue
    per_call = results["optimizer_steps"] / max(hist[-1]["step"], 1)
    steps = np.array([row["step"] for row in hist]) * per_call
    ax.plot(steps, [row["r2_batch"] for row in hist], label=name)
  ax.set_xlabel("optimiser steps")
  ax.set_ylabel("in-batch R$^2$(z | f(x))")
  ax.set_ylim(0.0, 1.02)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)


def r2_bars(ax, entries: Mapping[str, Mapping[str, float]]) -> None:
  """Held-out R^2 of z: trained encoder, raw x and untrained encoder per setting."""
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
  """Pearson r of decoded sprite factors (mean over seeds) per representation."""
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
