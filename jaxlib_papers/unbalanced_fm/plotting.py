"""Figures of unbalanced_fm, shared by the reproduction check and the demo (``core.figures``).

* :func:`coupling_figure`: problem B's acceptance Z, D2(q0 || p0) and TV(q0, p0) against the
  cutoff (mean and spread over seeds; partial OT at the same mass beside the cutoff rule),
  and problem A's acceptance against its closed form.
* :func:`flow_figure`: success, class TV against p1 and validity of the docking flow from
  p0 against the cutoff, with and without the energy term.
* :func:`ligands_figure`: apo, generated (per cutoff) and holo ligands in the pocket (x-y).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures


def _x(deltas) -> np.ndarray:
  """Cutoffs with inf drawn one step past the largest finite one."""
  d = np.asarray(deltas, np.float64)
  finite = d[np.isfinite(d)]
  top = finite.max() * 1.4 if finite.size else 1.0
  return np.where(np.isfinite(d), d, top)


def _band(ax, x, values, label, **kw) -> None:
  v = np.asarray(values, np.float64)
  mean, std = v.mean(0), v.std(0)
  ax.plot(x, mean, "o-", label=label, **kw)
  ax.fill_between(x, mean - std, mean + std, alpha=0.2, **kw)


def coupling_figure(result) -> Figure:
  """Problem B: Z, D2 and TV(q0, p0) against delta; problem A: Z against its closed form."""
  fig, axes = figures.new_figure(1, 4, size=(3.4, 3.0))
  c = result.coupling
  x = _x(c["deltas"])
  _band(axes[0], x, c["acceptance"], "cutoff Z", color="tab:blue")
  _band(axes[1], x, c["d2_0"], "cutoff", color="tab:blue")
  _band(axes[1], x, c["partial_d2_0"], "partial OT (m = Z)", color="tab:orange")
  _band(axes[2], x, c["tv_0"], "cutoff", color="tab:blue")
  _band(axes[2], x, c["partial_tv_0"], "partial OT (m = Z)", color="tab:orange")
  for ax, title in zip(axes[:3], ("acceptance Z (B)", "D2(q0 || p0) (B)", "TV(q0, p0) (B)")):
    ax.set_xlabel("cutoff delta (A; last: inf)")
    ax.set_title(title)
    ax.legend(fontsize=7)
  m = result.modes
  _band(axes[3], m["deltas"], m["acceptance"], "measured", color="tab:blue")
  axes[3].plot(m["deltas"], m["closed_acceptance"], "k:", label="closed form")
  axes[3].set_xlabel("cutoff delta")
  axes[3].set_title("acceptance Z (A, reweighted modes)")
  axes[3].legend(fontsize=7)
  return fig


def flow_figure(result) -> Figure:
  """Success, class TV and validity of the docking flow (from p0) against the cutoff."""
  fig, axes = figures.new_figure(1, 3, size=(3.4, 3.0))
  d = result.dock
  if not d:
    return fig
  delta, weight = np.asarray(d["delta"]), np.asarray(d["energy_weight"])
  cutoffs = list(dict.fromkeys(delta.tolist()))
  for e, color in zip(sorted(set(weight.tolist())), ("tab:blue", "tab:green")):
    for ax, key in zip(axes, ("success", "tv", "valid")):
      values = np.asarray(d[key])
      per = np.stack([values[(delta == c) & (weight == e)] for c in cutoffs], -1)
      _band(ax, _x(cutoffs), per, f"energy weight {e:g}", color=color)
  for ax, title in zip(axes, ("success (RMSD < .5 A)", "class TV to p1", "valid")):
    ax.set_xlabel("cutoff delta (A; last: inf)")
    ax.set_title(title)
    ax.legend(fontsize=7)
  return fig


def _draw(ax, conformers, color, label) -> None:
  for i, x in enumerate(np.asarray(conformers)):
    ax.plot(x[:, 0], x[:, 1], "-o", color=color, ms=2, lw=1, alpha=0.6,
            label=label if i == 0 else None)


def ligands_figure(samples, pocket, deltas) -> Figure:
  """Apo (p0), generated per cutoff (seed 0, no energy term) and holo (p1) ligands."""
  generated = samples.get("generated")
  panels = [("apo (p0)", samples["apo"], "tab:gray")]
  if generated is not None:
    panels += [(f"generated, delta={d:g}", g, "tab:blue") for d, g in zip(deltas, generated)]
  panels.append(("holo (p1)", samples["holo"], "tab:red"))
  fig, axes = figures.new_figure(1, len(panels), size=(2.8, 2.8), squeeze=False)
  pocket = np.asarray(pocket)
  for ax, (title, x, color) in zip(axes[0], panels):
    ax.scatter(pocket[:, 0], pocket[:, 1], s=2, c="0.85")
    _draw(ax, x, color, title)
    ax.set_title(title, fontsize=8)
    ax.set_aspect("equal")
  return fig
