"""DeepRUOT figures (``core.figures`` Figures): ``reproduce.py`` and ``colab/ruot.py`` call them.

Every function takes a :class:`~jaxlib_papers.ruot.train.RuotResult` (and, for the paths,
arrays from ``flows.make_pushforward``) and plots seed 0.
"""

from __future__ import annotations

import numpy as np

from jaxlib_papers.core import figures


def _time_colors(num: int) -> np.ndarray:
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  return colormaps["viridis"](np.linspace(0, 1, num))


def dynamics_figure(result, title: str):
  """Data and model particles (left) and mass over time (right).

  Args:
    result: ``train.run``'s result (``data``, ``ode``, ``summary``).
    title: the left panel's title prefix.
  """
  snaps = result.data
  xs, log_ws = result.ode
  fig, axes = figures.new_figure(1, 2, size=(5.5, 4.5))
  colors = _time_colors(len(snaps.times))
  for k, (t, x) in enumerate(zip(snaps.times, snaps.xs)):
    axes[0].scatter(x[:, 0], x[:, 1], s=3, color=colors[k], alpha=0.3)
    w = np.exp(log_ws[0, k])
    axes[0].scatter(xs[0, k, :, 0], xs[0, k, :, 1], s=30 * w / w.mean() * 0.1, marker="x",
                    color=colors[k], label=f"t={t:g}")
  axes[0].set_title(f"{title}: data (dots), model particles (x)")
  axes[0].legend(fontsize=7)
  rows = result.summary
  times = [r["time"] for r in rows]
  axes[1].plot(times, [r["mass"] for r in rows], "o-", label="model mass")
  axes[1].plot(times, snaps.relative_mass, "s--", label="N_k / N_0")
  axes[1].plot(times, np.ones(len(times)), ":", label="no growth")
  axes[1].set_xlabel("t")
  axes[1].legend()
  return fig


def trajectories_figure(result, paths: np.ndarray, num_paths: int = 25):
  """Data as dots, a few ODE particle paths, the model's last particles (size = weight).

  Args:
    result: ``train.run``'s result.
    paths: [T, n, d] seed 0's particle positions on a fine time grid.
    num_paths: about how many paths to draw.
  """
  snaps = result.data
  xs, log_ws = result.ode
  colors = _time_colors(len(snaps.times))
  fig, ax = figures.new_figure(1, 1, size=(6, 5))
  for k, (t, x) in enumerate(zip(snaps.times, snaps.xs)):
    held = result.held_out_time == t
    ax.scatter(x[:, 0], x[:, 1], s=4, color=colors[k], alpha=0.35,
               label=f"data t={t:g}" + (" (held out)" if held else ""))
  for i in range(0, paths.shape[1], max(1, paths.shape[1] // num_paths)):
    ax.plot(paths[:, i, 0], paths[:, i, 1], color="gray", lw=0.6, alpha=0.6)
  w_end = np.exp(log_ws[0, -1])
  ax.scatter(xs[0, -1, :, 0], xs[0, -1, :, 1], s=60 * w_end / w_end.max(), marker="x",
             color="red", label="model t=end")
  ax.set_xlabel("x1")
  ax.set_ylabel("x2")
  ax.legend(fontsize=7)
  return fig


def growth_figure(result, times=(1.0, 3.0), extent=((0.0, 2.2), (0.0, 2.3))):
  """Seed 0's learned growth g(t, x) on a grid of the plane, one panel per time."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  nets = result.networks
  p0 = jax.tree.map(lambda a: a[0], result.params)
  grid_1, grid_2 = np.meshgrid(np.linspace(*extent[0], 60), np.linspace(*extent[1], 60))
  grid = jnp.asarray(np.stack([grid_1.ravel(), grid_2.ravel()], 1), jnp.float32)
  fig, axes = figures.new_figure(1, len(times), size=(5.5, 4), squeeze=False)
  for ax, t in zip(axes[0], times):
    g = np.asarray(nets.growth(p0, t, grid)).reshape(grid_1.shape)
    im = ax.contourf(grid_1, grid_2, g, levels=30, cmap="rainbow")
    ax.set_title(f"g(t={t:g}, x)")
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    fig.colorbar(im, ax=ax)
  return fig


def mass_figure(result, path_times: np.ndarray, path_log_w: np.ndarray, held: int):
  """Model mass over time against N_k / N_0 (left); the held-out snapshot and the model's
  prediction there (right).

  Args:
    result: ``train.run``'s result.
    path_times: [T] a fine time grid; path_log_w: [T, n] seed 0's log-weights on it.
    held: index of the held-out time in ``result.data``.
  """
  snaps = result.data
  xs, log_ws = result.ode
  fig, axes = figures.new_figure(1, 2, size=(5.5, 4))
  axes[0].plot(path_times, np.exp(path_log_w).sum(1), label="model mass sum_i w_i")
  axes[0].plot(snaps.times, snaps.relative_mass, "s", label="N_k / N_0 (data)")
  axes[0].axhline(1.0, ls=":", color="k", label="no growth")
  axes[0].set_xlabel("t")
  axes[0].legend()
  y = snaps.xs[held]
  axes[1].scatter(y[:, 0], y[:, 1], s=5, alpha=0.4,
                  label=f"data t={snaps.times[held]:g} (held out)")
  w = np.exp(log_ws[0, held])
  axes[1].scatter(xs[0, held, :, 0], xs[0, held, :, 1], s=40 * w / w.max(), marker="x",
                  color="red", label="model prediction")
  axes[1].legend(fontsize=8)
  return fig
