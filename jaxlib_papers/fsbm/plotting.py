"""Plots: trajectories over the obstacles, with keypoints."""

from __future__ import annotations

import numpy as np


def draw_obstacles(ax, task: str, lim: float = 15.0) -> None:
  from jaxlib_papers.fsbm import tasks  # pylint: disable=g-import-not-at-top
  grid = np.linspace(-lim, lim, 400)
  xx, yy = np.meshgrid(grid, grid)
  hit = tasks.collision(task, np.stack([xx, yy], axis=-1)).astype(float)
  ax.contourf(xx, yy, hit, levels=[0.5, 1.5], colors=["0.75"])


def plot_trajectories(ax, task: str, paths, keypoints=None, *, title: str = "",
                      num: int = 60, lim: float | None = None) -> None:
  """paths: [S, n, 2] (time first); keypoints: [K, S_k, 2] or None."""
  lim = lim or (15.0 if task == "stunnel" else 10.0)
  draw_obstacles(ax, task, lim)
  paths = np.asarray(paths)
  for i in range(min(num, paths.shape[1])):
    ax.plot(paths[:, i, 0], paths[:, i, 1], lw=0.5, color="tab:blue", alpha=0.5)
  ax.scatter(paths[0, :, 0], paths[0, :, 1], s=2, color="tab:green")
  ax.scatter(paths[-1, :, 0], paths[-1, :, 1], s=2, color="tab:red")
  if keypoints is not None:
    for kp in np.asarray(keypoints)[:20]:
      ax.plot(kp[:, 0], kp[:, 1], lw=0.8, color="k", alpha=0.6)
  ax.set_xlim(-lim, lim)
  ax.set_ylim(-lim, lim)
  ax.set_aspect("equal")
  ax.set_title(title)
