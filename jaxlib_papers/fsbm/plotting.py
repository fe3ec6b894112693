"""Plots: trajectories over the obstacles with keypoints; opinion polarisation.

The figure functions take ``train.RunResult`` rows and return ``core.figures`` figures
(saved by the reproduction check, shown by the notebook)."""

from __future__ import annotations

import numpy as np

from jaxlib_papers.core import figures


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


def plot_polarisation(ax, curves: dict, *, target: float | None = None) -> None:
  """Polarisation index over time; curves: name -> [S_saved] values on linspace(0, 1)."""
  for name, values in curves.items():
    values = np.asarray(values)
    ax.plot(np.linspace(0.0, 1.0, len(values)), values, label=name)
  if target is not None:
    ax.axhline(target, color="k", ls=":", label="p1 samples")
  ax.set_xlabel("t")
  ax.set_ylabel("polarisation index mean|2 d_ij - 1|")
  ax.legend()


def plot_opinion_pca(ax, paths, *, title: str = "", num: int = 60) -> None:
  """Opinion paths [S, n, D] projected on the top-2 principal axes of the samples
  at the middle time (where polarisation shows)."""
  paths = np.asarray(paths, np.float64)
  mid = paths[len(paths) // 2]
  centre = mid.mean(axis=0)
  _, _, vt = np.linalg.svd(mid - centre, full_matrices=False)
  proj = (paths - centre) @ vt[:2].T                               # [S, n, 2]
  for i in range(min(num, proj.shape[1])):
    ax.plot(proj[:, i, 0], proj[:, i, 1], lw=0.4, color="tab:blue", alpha=0.4)
  ax.scatter(proj[len(proj) // 2, :, 0], proj[len(proj) // 2, :, 1], s=2, color="tab:orange",
             label="t = 0.5")
  ax.scatter(proj[-1, :, 0], proj[-1, :, 1], s=2, color="tab:red", label="t = 1")
  ax.set_aspect("equal")
  ax.legend()
  ax.set_title(title)


def opinion_figure(fsbm, base, reference_polarisation, *, title: str = "opinion"):
  """Polarisation over time (FSBM, tau = 0, reference dynamics, p1) and both models'
  paths in PCA; fsbm / base are ``train.RunResult`` rows of the opinion task."""
  fig, axes = figures.new_figure(1, 3, size=(5.0, 4.5))
  ev_f, ev_b = fsbm.evaluation, base.evaluation
  plot_polarisation(axes[0], {"FSBM": ev_f.polarisation_path,
                              "tau = 0": ev_b.polarisation_path,
                              "reference dynamics": reference_polarisation},
                    target=ev_f.target_polarisation)
  for ax, ev, name in ((axes[1], ev_f, "FSBM"), (axes[2], ev_b, "tau = 0")):
    plot_opinion_pca(ax, ev.paths, title=f"{title} {name} (PCA at t = 0.5)")
  return fig


def trajectories_figure(task: str, fsbm, base, *, with_w2: bool = True):
  """FSBM's and tau = 0's forward paths over the obstacles, with the feedback keypoints;
  fsbm / base are ``train.RunResult`` rows of a crowd task."""
  fig, axes = figures.new_figure(1, 2, size=(5.0, 5.0))
  for ax, res, name in ((axes[0], fsbm, "FSBM"), (axes[1], base, "tau = 0")):
    ev = res.evaluation
    title = f"{task} {name}: collision {ev.collision_rate:.2f}"
    plot_trajectories(ax, task, ev.paths, res.feedback_keypoints,
                      title=title + (f", W2 {ev.w2:.2f}" if with_w2 else ""))
  return fig


def run_figure(task: str, run):
  """One run's forward paths (a crowd task's plane, or opinions on their top-2 principal
  axes), with the feedback keypoints; ``run`` a ``train.RunResult`` (the launcher's figure)."""
  fig, ax = figures.new_figure(size=(5.0, 5.0))
  ev = run.evaluation
  title = f"{task}, tau = {run.tau:g}: W2 {ev.w2:.2f}"
  if task == "opinion":
    plot_opinion_pca(ax, ev.paths, title=title)
  else:
    plot_trajectories(ax, task, ev.paths, run.feedback_keypoints, title=title)
  return fig


def collision_history_figure(runs, names):
  """The forward model's collision rate after each alternation, one line per run."""
  fig, ax = figures.new_figure(size=(5.0, 3.0))
  for res, name in zip(runs, names):
    ax.plot([r["step"] for r in res.history], [r["collision_rate"] for r in res.history],
            marker="o", label=name)
  ax.set_xlabel("alternation")
  ax.set_ylabel("collision rate")
  ax.set_ylim(-0.05, 1.05)
  ax.legend()
  return fig
