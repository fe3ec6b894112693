"""Every OCM figure, shared by the reproduction check and the Colab demo.

Each function takes a :class:`jaxlib_papers.ocm.train.Result` and returns a
``matplotlib.figure.Figure`` (``core.figures``), or None when the result holds nothing to
draw.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures
from jaxlib_papers.ocm import gmm


def samples_figure(result, dataset: str) -> Figure | None:
  """One scatter of dims 0, 1 per method's samples (the first quality K)."""
  samples = next(iter(result.samples.values()), {})
  if not samples:
    return None
  names = list(samples)
  fig, axes = figures.new_figure(1, len(names), size=(2.4, 2.6), squeeze=False)
  for ax, name in zip(axes[0], names):
    x = samples[name]
    ax.scatter(x[:, 0], x[:, 1], s=1, alpha=0.4)
    ax.set_title(name, fontsize=8)
    ax.set_xlim(-1.2, 1.2)
    ax.set_ylim(-1.2, 1.2)
    ax.set_xticks([])
    ax.set_yticks([])
  fig.suptitle(f"{dataset}: K = {next(iter(result.samples))} samples (dims 0, 1)")
  return fig


def samples_on_density(result, num_k: int = 10, max_points: int = 600) -> Figure | None:
  """Each method's K-step samples over the true 2-D mixture density (grey contours)."""
  samples = result.samples.get(num_k, {})
  if not samples or result.mixture is None:
    return None
  grid = np.linspace(-1.2, 1.2, 120)
  xx, yy = np.meshgrid(grid, grid)
  points = jnp.asarray(np.stack([xx, yy], -1), jnp.float32)
  density = np.exp(np.asarray(gmm.log_prob(result.mixture, points)))
  fig, axes = figures.new_figure(1, len(samples), size=(2.3, 2.5), squeeze=False)
  for ax, (name, x) in zip(axes[0], samples.items()):
    ax.contourf(xx, yy, density, levels=12, cmap="Greys")
    ax.scatter(x[:max_points, 0], x[:max_points, 1], s=1.5, c="tab:red", alpha=0.6)
    ax.set_title(name, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
  return fig


def head_error_figure(result) -> Figure | None:
  """Each learned method's error in h-space (h = sigma_t^2 diag H) against t."""
  errors = result.head_error
  if not errors:
    return None
  ts = sorted(errors)
  fig, ax = figures.new_figure(size=(4.5, 3))
  for name in errors[ts[0]]:
    ax.semilogy(ts, [errors[t][name] for t in ts], "o-", label=name)
  ax.set_xlabel("t")
  ax.set_ylabel("E ||h - sigma^2 diag H||^2 / d")
  ax.legend(fontsize=8)
  return fig


def nelbo_figure(result, num_k: int = 10) -> Figure | None:
  """The K-step NELBO of each method but beta~ (off the scale), nats/dim."""
  row = result.nelbo.get(num_k)
  if not row:
    return None
  names = [n for n in row if n != "beta_tilde"]
  fig, ax = figures.new_figure(size=(4.5, 3))
  ax.bar(names, [row[n] for n in names])
  ax.set_ylabel(f"NELBO (nats/dim), K = {num_k}")
  ax.tick_params(axis="x", labelrotation=30)
  return fig
