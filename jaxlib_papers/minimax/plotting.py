"""Figures of LEN, shared by the reproduction check and the demo (``core.figures``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures
from jaxlib_papers.minimax import train


def refresh_period(label: str) -> int:
  """m of a LEN label ("EG-2" -> 1, "LEN(m=10)" -> 10)."""
  return 1 if label == "EG-2" else int(label.split("=")[1].rstrip(")"))


def oracle_costs(label: str, length: int, dim: int) -> list[int]:
  """#F + d #J after each of ``length`` iterations of method ``label`` (EG: #F only)."""
  if label.startswith("EG("):
    return [2 * (t + 1) for t in range(length)]
  m = refresh_period(label)
  return [2 * (t + 1) + dim * math.ceil((t + 1) / m) for t in range(length)]


def convergence_figure(results_by_n: Mapping[str, train.RunResult]) -> Figure:
  """||F|| against oracle cost, one panel per problem size.

  Args:
    results_by_n: ``{title: train.run(...) result}``.
  """
  fig, axes = figures.new_figure(1, len(results_by_n), size=(4.5, 3.4), squeeze=False)
  for ax, (title, result) in zip(axes[0], results_by_n.items()):
    for label, s in result.methods.items():
      hist = s.grad_norm_history
      if label.startswith("EG(") or not hist:
        continue
      ax.semilogy(oracle_costs(label, len(hist), result.dim), hist, label=label)
    for label, s in result.methods.items():
      if label.startswith("EG(") and s.grad_norm_history:
        hist = s.grad_norm_history
        ax.semilogy(oracle_costs(label, len(hist), result.dim), hist, "--", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("oracle cost (#F + d #J)")
    ax.set_ylabel("||F(z_{t+1/2})||")
    ax.set_title(title)
    ax.legend(fontsize=7)
  return fig


def history_figure(result: train.RunResult) -> Figure:
  """||F|| of every method against iterations (left) and oracle cost (right)."""
  fig, axes = figures.new_figure(1, 2, size=(5.0, 3.6))
  for label, s in result.methods.items():
    hist = np.asarray(s.grad_norm_history)
    style = "--" if label.startswith("EG(") else "-"
    axes[0].semilogy(np.arange(1, len(hist) + 1), hist, style, label=label)
    axes[1].semilogy(oracle_costs(label, len(hist), result.dim), hist, style, label=label)
  axes[0].set_xlabel("iterations")
  axes[1].set_xlabel("oracle cost #F + d #J")
  for ax in axes:
    ax.set_xscale("log")
    ax.set_ylabel("||F(z_{t+1/2})||")
    ax.legend(fontsize=8)
  return fig


def m_sweep_figure(ms: Sequence[int], sweep: Sequence[train.MethodResult], title: str
                   ) -> Figure:
  """Iterations, oracle cost and seconds of LEN against its refresh period m.

  Args:
    ms: the m of each run.
    sweep: the :class:`train.MethodResult` of each m.
    title: the figure's title.
  """
  fig, axes = figures.new_figure(1, 3, size=(4.0, 3.2))
  columns = (("iterations", [s.iterations for s in sweep]),
             ("oracle cost", [s.oracle_cost for s in sweep]),
             ("seconds", [s.run_seconds for s in sweep]))
  for ax, (name, values) in zip(axes, columns):
    ax.plot(ms, values, "o-")
    ax.set_xscale("log")
    ax.set_xlabel("m (Jacobian refresh period)")
    ax.set_ylabel(name)
  fig.suptitle(title)
  return fig
