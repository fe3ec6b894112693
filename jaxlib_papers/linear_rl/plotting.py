"""Figures of linear_rl, shared by the reproduction check and the demo (``core.figures``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures
from jaxlib_papers.linear_rl import train


def regret_figure(curves: Mapping[str, np.ndarray], title: str) -> Figure:
  """Cumulative regret, seed mean with min-max band.

  Args:
    curves: ``{agent label: per-episode regret [seeds, T]}``.
    title: the panel's title.
  """
  fig, ax = figures.new_figure(size=(5, 3.5))
  for label, regret in curves.items():
    cum = np.cumsum(regret, axis=1)
    t = np.arange(1, cum.shape[1] + 1)
    ax.plot(t, cum.mean(0), label=label)
    ax.fill_between(t, cum.min(0), cum.max(0), alpha=0.2)
  ax.set_xlabel("episode")
  ax.set_ylabel("cumulative regret")
  ax.set_title(title)
  ax.legend(fontsize=7)
  return fig


def out_of_span_figure(agent: train.AgentResult) -> Figure:
  """Out-of-span episodes so far, one step curve per seed, against d H (Lemma 3)."""
  fig, ax = figures.new_figure(size=(6, 3.5))
  for seed, flags in enumerate(np.asarray(agent.out_of_span)):
    ax.step(np.arange(1, len(flags) + 1), np.cumsum(flags), where="post",
            label=f"seed {seed}")
  ax.axhline(agent.dH, color="k", ls="--", label="d H")
  ax.set_xlabel("episode")
  ax.set_ylabel("out-of-span episodes")
  ax.set_yscale("log")
  ax.legend(fontsize=7)
  return fig


def deep_sea_path(q_weights: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
  """The greedy path of one DeepSea plan as a [N, N] grid (1 on the visited cells).

  Args:
    q_weights: ``[H, 2 N]`` a plan's weights over (column, action) one-hot features.
    params: the seed's environment parameters (``right [H, N]``: the action meaning
      "right" in each cell).
  """
  size = q_weights.shape[0]
  grid = np.zeros((size, size))
  col = 0
  for h in range(size):
    action = int(np.argmax(q_weights[h, 2 * col:2 * col + 2]))
    grid[h, col] = 1
    right = action == int(params["right"][h, col])
    col = min(col + 1, size - 1) if right else max(col - 1, 0)
  grid[size - 1, size - 1] += 0.5
  return grid


def deep_sea_path_figure(q_weights: np.ndarray, params: Mapping[str, Any]) -> Figure:
  """:func:`deep_sea_path` drawn (the goal is the bottom-right cell)."""
  fig, ax = figures.new_figure(size=(3.5, 3.5))
  ax.imshow(deep_sea_path(np.asarray(q_weights), params), cmap="Blues")
  ax.set_title("greedy path (goal: bottom right)")
  ax.set_xlabel("column")
  ax.set_ylabel("step h")
  return fig
