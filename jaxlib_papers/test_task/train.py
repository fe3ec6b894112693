"""Runs a config: ``run(config, workdir) -> RunResult``.

Nothing here trains on the paper's data: the evaluations are fitted (``evaluate``), and the
generated toy's models are trained (``toy``). The config becomes settings once
(:func:`settings_from_config`, after ``CONSTRAINTS``), and ``<workdir>/results.json`` gets
the typed result (``core.results.write``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, NamedTuple

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.test_task import data as data_lib
from jaxlib_papers.test_task import evaluate, toy
from jaxlib_papers.test_task.configs import default as default_config


class RunSettings(NamedTuple):
  """A config as settings."""
  analysis: evaluate.AnalysisSettings
  toy: toy.ToySettings
  toy_seeds: tuple[int, ...]


def settings_from_config(config) -> RunSettings:
  """The config's settings, checked against ``CONSTRAINTS`` first (ValueError naming keys)."""
  config_lib.validate(config, default_config.CONSTRAINTS)
  a, t = config.analysis, config.toy
  analysis = evaluate.AnalysisSettings(
      grid=tuple(float(v) for v in a.grid),
      emergence_grid=tuple(float(v) for v in a.emergence_grid), post=a.post,
      bootstrap_samples=int(a.bootstrap_samples), bootstrap_batch=int(a.bootstrap_batch),
      seed=int(config.seed))
  toy_settings = toy.ToySettings(
      num_models=int(t.num_models), input_dim=int(t.input_dim), new_every=int(t.new_every),
      task_fraction=float(t.task_fraction), shift=float(t.shift),
      log2_width=tuple(float(v) for v in t.log2_width),
      log2_examples=tuple(float(v) for v in t.log2_examples), ridge=float(t.ridge),
      finetune_examples=int(t.finetune_examples), finetune_ridge=float(t.finetune_ridge),
      test_examples=int(t.test_examples), batch_size=int(t.batch_size), dtype=t.dtype)
  toy.check_settings(toy_settings)
  seeds = tuple(int(config.seed) + i for i in range(int(t.num_seeds)))
  return RunSettings(analysis, toy_settings, seeds)


def load_data(config) -> data_lib.ModelTable | None:
  """The config's table: fetched official files, a folder, or None (``source="toy"``)."""
  source = config.data.source
  if source == "official":
    return data_lib.fetch_table(mmlu_metric=config.data.mmlu_metric)
  if source == "folder":
    if not config.data.folder:
      raise ValueError("config.data.folder must name a folder when data.source = 'folder'")
    return data_lib.load_table(config.data.folder, mmlu_metric=config.data.mmlu_metric)
  return None


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What :func:`run` returns (and writes as ``results.json``)."""
  data: str                                           # where the evaluations came from
  benchmarks: dict[str, evaluate.BenchmarkResult]     # {} when only the toy ran
  toy: list[toy.ToyFit]                               # one per seed
  seconds: dict[str, float]
  table: Any = results.in_memory()                    # data.ModelTable or None
  toy_models: Any = results.in_memory()               # [toy.ToyModels] per seed


def run(config, workdir: str | pathlib.Path | None = None, *,
        table: data_lib.ModelTable | None = None, verbose: bool = True) -> RunResult:
  """Fits the paper's evaluations (unless ``data.source = "toy"``) and runs the toy.

  Args:
    config: a ``configs/default.py`` config.
    workdir: folder for ``results.json`` (None: nothing written).
    table: an already loaded table (then ``config.data`` is not read).
    verbose: print a line per analysis.

  Raises:
    ValueError: a bad config value (before anything runs); a malformed data file.
    FileNotFoundError, KeyError: a missing evaluation file or a model without metadata.
  """
  settings = settings_from_config(config)
  seconds = {}
  start = time.perf_counter()
  if table is None:
    table = load_data(config)
  benchmarks = {}
  if table is not None:
    seconds["load"] = time.perf_counter() - start
    benchmarks = evaluate.analyse(table, settings.analysis)
    seconds["fits"] = time.perf_counter() - start - seconds["load"]
    if verbose:
      for bench, r in benchmarks.items():
        print(f"{bench}: theta pre {r.pre.theta:+.3f} (se {r.pre.se:.3f}, p {r.pre.p:.1e}) "
              f"post {r.post.theta:+.3f} (se {r.post.se:.3f}, p {r.post.p:.2f}); "
              f"c_e {r.emergence}", flush=True)
  start = time.perf_counter()
  with enable_x64(settings.toy.dtype == "float64"):
    fits, worlds = toy.run_toy(list(settings.toy_seeds), settings.toy)
  seconds["toy"] = time.perf_counter() - start
  if verbose:
    for f in fits:
      print(f"toy seed {f.seed}: theta pre {f.theta_pre:+.3f} (p {f.p_pre:.1e}), post "
            f"{f.theta_post:+.3f} (p {f.p_post:.2f})", flush=True)
  result = RunResult(data=table.source if table is not None else "generated",
                     benchmarks=benchmarks, toy=fits, seconds=seconds, table=table,
                     toy_models=worlds)
  results.write(result, workdir, indent=1)
  return result
