"""Figures of "Training on the test task", shared by the reproduction check and the demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures
from jaxlib_papers.test_task import data as data_lib
from jaxlib_papers.test_task import evaluate, toy

_OLD, _NEW = "tab:blue", "tab:orange"
_TITLES = {"mmlu": "MMLU", "gsm8k": "GSM8K"}


def post_scores(table: data_lib.ModelTable, benchmark: str, post: str = "max") -> np.ndarray:
  """[n] adjusted scores: max(base, fine-tuned) ("max") or the fine-tuned one ("ft")."""
  pre, ft = table.scores[f"{benchmark}_pre"], table.scores[f"{benchmark}_ft"]
  return np.maximum(pre, ft) if post == "max" else ft


def _scatter(ax, compute, score, new) -> None:
  old = new == 0
  ax.scatter(compute[old], score[old], s=14, color=_OLD, label="older")
  ax.scatter(compute[~old], score[~old], s=14, color=_NEW, label="newer (>= Nov 2023)")
  ax.set_xscale("log")
  ax.set_xlabel("pretraining compute C (FLOPs)")


def _hinge_lines(ax, fit: evaluate.Fit, chance: float, compute: np.ndarray) -> None:
  grid = np.logspace(np.log10(compute.min()), np.log10(compute.max()), 200)
  line = chance + fit.alpha * np.maximum(0.0, np.log10(grid) - fit.log10_emergence)
  ax.plot(grid, line, color=_OLD, lw=1.5)
  ax.plot(grid, line + fit.theta, color=_NEW, lw=1.5,
          label=f"theta = {fit.theta:.3f} (se {fit.se:.3f}), R2 = {fit.r2_uncentered:.3f}")


def figure1(table: data_lib.ModelTable, results: Mapping[str, evaluate.BenchmarkResult],
            post: str = "max") -> Figure:
  """Figure 1: accuracy against compute, before (left) and after (right) fine-tuning every
  model on the task data, with both hinge lines (older; newer = older + theta)."""
  fig, axes = figures.new_figure(len(results), 2, size=(4.6, 3.4), squeeze=False)
  for row, (bench, result) in zip(axes, results.items()):
    pre = table.scores[f"{bench}_pre"]
    for ax, (name, score, fit) in zip(row, (
        ("base models", pre, result.pre),
        ("fine-tuned on the task data", post_scores(table, bench, post), result.post))):
      keep = np.isfinite(score)
      _scatter(ax, table.compute[keep], score[keep], table.new[keep])
      _hinge_lines(ax, fit, result.chance, table.compute[keep])
      ax.set_ylabel(f"{_TITLES[bench]} accuracy")
      ax.set_title(f"{_TITLES[bench]}, {name}")
      ax.legend(fontsize=7, loc="upper left")
  return fig


def gain_figure(table: data_lib.ModelTable, benchmarks: Sequence[str] = ("mmlu", "gsm8k"),
                post: str = "max") -> Figure:
  """Gain from fine-tuning on the task data (adjusted - base) against compute."""
  fig, axes = figures.new_figure(1, len(benchmarks), size=(4.4, 3.3), squeeze=False)
  for ax, bench in zip(axes[0], benchmarks):
    gain = post_scores(table, bench, post) - table.scores[f"{bench}_pre"]
    keep = np.isfinite(gain)
    _scatter(ax, table.compute[keep], gain[keep], table.new[keep])
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_ylabel("gain from fine-tuning")
    ax.set_title(_TITLES[bench])
    ax.legend(fontsize=7)
  return fig


def emergence_figure(table: data_lib.ModelTable,
                     results: Mapping[str, evaluate.BenchmarkResult],
                     settings: evaluate.AnalysisSettings = evaluate.AnalysisSettings()
                     ) -> Figure:
  """The emergence rows: older models in range at each fine-tuning budget, with the fitted
  floor-at-chance hinge and its emergence point c_e."""
  width = max(len(r.emergence) for r in results.values())
  fig, axes = figures.new_figure(len(results), width, size=(3.3, 2.9), squeeze=False)
  low, high = settings.emergence_compute
  for row, (bench, result) in zip(axes, results.items()):
    columns = evaluate.emergence_columns(table, bench)
    for ax, (label, column) in zip(row, columns.items()):
      score = table.scores[column]
      keep = (table.new == 0) & (table.compute > low) & (table.compute < high) & np.isfinite(
          score)
      ax.scatter(table.compute[keep], score[keep], s=12, color=_OLD)
      c_e = result.emergence[label]
      log_c = np.log10(table.compute[keep])
      x = np.maximum(0.0, log_c - c_e)
      alpha = (x @ (score[keep] - result.chance)) / max(x @ x, 1e-300)
      grid = np.linspace(log_c.min(), log_c.max(), 200)
      ax.plot(10 ** grid, result.chance + alpha * np.maximum(0.0, grid - c_e), color="k")
      ax.axvline(10 ** c_e, color="gray", ls="--", lw=0.8)
      ax.set_xscale("log")
      ax.set_title(f"{_TITLES[bench]} {label}: c_e = {10 ** c_e:.1e}", fontsize=8)
    for ax in row[len(columns):]:
      ax.set_visible(False)
  return fig


def step_front(log_compute: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(knots, values) of the step front: strict improvements in order of compute, extended
  flat to the largest compute."""
  order = np.argsort(log_compute, kind="stable")
  knots, values = [log_compute[order[0]]], [score[order[0]]]
  for i in order[1:]:
    if score[i] > values[-1]:
      knots.append(log_compute[i])
      values.append(score[i])
  knots.append(log_compute[order[-1]])
  values.append(values[-1])
  return np.asarray(knots), np.asarray(values)


def pareto_figure(table: data_lib.ModelTable,
                  results: Mapping[str, evaluate.BenchmarkResult], post: str = "max"
                  ) -> Figure:
  """Pareto fronts of all models and of the older ones, before and after fine-tuning."""
  fig, axes = figures.new_figure(len(results), 2, size=(4.4, 3.2), squeeze=False)
  for row, (bench, result) in zip(axes, results.items()):
    for ax, (name, score, area) in zip(row, (
        ("base", table.scores[f"{bench}_pre"], result.pareto_pre),
        ("adjusted", post_scores(table, bench, post), result.pareto_post))):
      keep = np.isfinite(score)
      log_c, s, new = np.log10(table.compute[keep]), score[keep], table.new[keep]
      _scatter(ax, 10 ** log_c, s, new)
      for subset, color, label in ((np.ones_like(new, bool), _NEW, "front, all models"),
                                   (new == 0, _OLD, "front, older models")):
        knots, values = step_front(log_c[subset], s[subset])
        ax.step(10 ** knots, values, where="post", color=color, label=label)
      ax.set_title(f"{_TITLES[bench]} {name}: area {area:.2f}")
      ax.legend(fontsize=6)
  return fig


def toy_figure(models: toy.ToyModels, fit: toy.ToyFit) -> Figure:
  """The toy: task accuracy against log10(N D), before and after the shared fine-tuning."""
  fig, axes = figures.new_figure(1, 2, size=(4.4, 3.3))
  compute = np.asarray(models.width) * np.asarray(models.examples)
  new = np.asarray(models.new)
  pre = np.asarray(models.acc_pre)
  post = np.maximum(pre, np.asarray(models.acc_ft))
  for ax, (name, score, theta, p) in zip(axes, (
      ("pretrained", pre, fit.theta_pre, fit.p_pre),
      ("fine-tuned on shared task data", post, fit.theta_post, fit.p_post))):
    _scatter(ax, compute, score, new)
    ax.set_xlabel("N D (features x examples)")
    ax.set_ylabel("task accuracy")
    ax.set_title(f"toy seed {fit.seed}, {name}\ntheta = {theta:.3f}, p = {p:.1e}",
                 fontsize=9)
    ax.legend(fontsize=7)
  return fig


def all_figures(result) -> dict[str, Figure]:
  """Every figure of a ``train.RunResult`` by file stem: ``fig1``, ``emergence``, ``pareto``
  (when the official table was fitted) and ``toy`` (the launcher and the check save these)."""
  out = {}
  if result.table is not None:
    out["fig1"] = figure1(result.table, result.benchmarks)
    out["emergence"] = emergence_figure(result.table, result.benchmarks)
    out["pareto"] = pareto_figure(result.table, result.benchmarks)
  out["toy"] = toy_figure(result.toy_models[0], result.toy[0])
  return out
