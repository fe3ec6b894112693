"""The experiment: ``run(config, workdir) -> RunResult``.

The config becomes :class:`RunSettings` once (checked: keys, the target's edges against its
weights) before any compilation. Per data set: fingerprints (RDKit) or a generated
stand-in; the baselines (random over seeds, scaffold, Butina at each cutoff) read out
exactly; SAE's split (``solver.num_seeds`` seeds in one compiled program, the best kept)
read out exactly and through its table; then ridge and Tanimoto kNN trained on the random
and the SAE splits, R^2 overall and per similarity bin. The typed :class:`RunResult` goes to
``<workdir>/results.json`` (``core.results``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, NamedTuple

import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import datasets, results
from jaxlib_papers.sae_split import data as data_lib
from jaxlib_papers.sae_split import evaluate, kernel, splitter
from jaxlib_papers.sae_split.configs import default as default_config


class RunSettings(NamedTuple):
  """What a config asks :func:`run` for, checked."""
  seed: int
  sets: tuple[str, ...]
  generated_size: int
  generated_iterations: int  # solver iterations on a generated set (0: solver's)
  generated_seeds: int       # solver seeds on a generated set (0: num_seeds)
  edges: np.ndarray          # [K0 + 1] user edges
  weights: np.ndarray        # [K0]
  test_size: float
  sigma: float
  num_seeds: int
  neighbours: int
  solver: dict[str, Any]     # the kernel.Settings fields but lam (per set)
  lam: float                 # < 0: the shipped value per set
  random_seeds: int
  butina_cutoffs: tuple[float, ...]
  ridge: float
  knn: int


def settings_from_config(config) -> RunSettings:
  """The :class:`RunSettings` of ``config``.

  Raises:
    ValueError: a config value that is not allowed (its key named), weights whose number
      does not match the edges', an unknown data set.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  try:
    edges, weights = splitter.check_target(config.target.edges, config.target.weights,
                                           config.target.test_size)
  except ValueError as e:
    raise ValueError(f"config.target: {e}") from None
  for name in config.data.sets:
    if name not in (*data_lib.DATASETS, "generated"):
      raise ValueError(f"config.data.sets: unknown set {name!r}; expected 'generated' or "
                       f"one of {list(data_lib.DATASETS)}")
  s = config.solver
  solver = dict(scale=float(s.scale), lr=float(s.lr), dual_lr=float(s.dual_lr),
                iterations=int(s.iterations), log_every=min(int(s.log_every),
                                                            int(s.iterations)),
                init=str(s.init), feasibility=float(s.feasibility))
  return RunSettings(int(config.seed), tuple(config.data.sets),
                     int(config.data.generated_size),
                     int(config.data.generated_iterations),
                     int(config.data.generated_seeds), edges, weights,
                     float(config.target.test_size), float(config.target.sigma),
                     int(s.num_seeds), int(s.neighbours), solver, float(s.lam),
                     int(config.baselines.random_seeds),
                     tuple(float(c) for c in config.baselines.butina_cutoffs),
                     float(config.model.ridge), int(config.model.knn))


def load_sets(config, data_dir=None, log=print) -> list[data_lib.AffinityData]:
  """The config's data sets: official files from ``data_dir`` / the cache / a download,
  or (offline) generated stand-ins, said so."""
  out = []
  for name in config.data.sets:
    if name == "generated":
      out.append(data_lib.generated(int(config.data.generated_size), int(config.seed)))
      continue
    try:
      path, origin = datasets.locate(f"sae_split/{name}.csv", data_dir)
      source = f"{origin}: sae_split/{name}.csv"
    except datasets.DataUnavailable as e:
      log(f"[data] not available, using generated data instead: {e}")
      path, source = None, ""
    out.append(data_lib.load(name, path, source, int(config.data.generated_size),
                             int(config.seed)))
  return out


# ------------------------------------------------------------------------------ results


@dataclasses.dataclass(frozen=True)
class SplitSummary:
  """A split's test histogram and its distance to the target."""
  name: str                  # "random", "scaffold", "butina 0.4", "sae"
  counts: list[int]          # [K] test counts per bin (padding bins included)
  l1: float                  # mean_k |n_k / n_test - E_k|
  top_fraction: float        # fraction of the test set in the top bin


@dataclasses.dataclass(frozen=True)
class ModelScores:
  """One model on one split: R^2 overall and per bin ([K])."""
  split: str
  model: str                 # "ridge" | "knn"
  r2: float
  r2_per_bin: list[float]


@dataclasses.dataclass(frozen=True)
class SetResult:
  name: str
  source: str
  num: int
  num_test: int
  random: list[SplitSummary]     # [random_seeds]
  baselines: list[SplitSummary]  # scaffold (with SMILES), Butina per cutoff
  sae: SplitSummary
  sae_relaxed_test_mass: float   # sum W at the kept iterate
  sae_test_mass_target: float    # a N
  sae_best_iteration: int
  sae_seed_scores: list[float]   # [R]
  table_exact: bool              # every test row has a training sample in its table
  table_failures: int            # test rows without one (the table's readout is 0 there)
  table_max_error: float         # max |r_table - r_exact| on the SAE split
  models: list[ModelScores]      # per random seed and SAE, ridge and kNN
  readouts: dict[str, list[float]]  # exact r of the test set: random (seed 0), scaffold, sae
  solver_seconds: float


@dataclasses.dataclass(frozen=True)
class RunResult:
  config: dict[str, Any]
  edges: list[float]           # [K + 1] with padding
  weights: list[float]         # [K]
  sets: list[SetResult]
  seconds: float


# ------------------------------------------------------------------------------ runs


def summary(name: str, readout: np.ndarray, edges, weights) -> SplitSummary:
  counts = evaluate.counts(readout, edges)
  return SplitSummary(name, counts.tolist(), evaluate.l1_to_target(counts, weights),
                      float(counts[-1] / counts.sum()))


def model_scores(split: str, dataset: data_lib.AffinityData, test: np.ndarray,
                 readout: np.ndarray, settings: RunSettings) -> list[ModelScores]:
  x, y = dataset.fingerprints, dataset.labels
  predictions = {
      "ridge": evaluate.ridge_predict(x[~test], y[~test], x[test], settings.ridge),
      "knn": evaluate.knn_predict(x, y, test, settings.knn)}
  edges = _padded_edges(settings)
  return [ModelScores(split, m, evaluate.r2(y[test], p),
                      evaluate.r2_per_bin(y[test], p, readout, edges))
          for m, p in predictions.items()]


def _padded_edges(settings: RunSettings) -> np.ndarray:
  return np.asarray(kernel.make_target(settings.edges, settings.weights).edges, np.float64)


def _baselines(dataset, settings, edges, weights, log):
  out = []
  if all(dataset.smiles):
    test = evaluate.scaffold_split(dataset.smiles, settings.test_size)
    out.append(summary("scaffold", evaluate.max_similarity_to_train(
        dataset.fingerprints, test), edges, weights))
  for cutoff in settings.butina_cutoffs:
    clusters = evaluate.butina_clusters(dataset.fingerprints, cutoff)
    test = evaluate.group_split(clusters, settings.test_size)
    out.append(summary(f"butina {cutoff:g}", evaluate.max_similarity_to_train(
        dataset.fingerprints, test), edges, weights))
    log(f"{dataset.name}: Butina {cutoff:g}: {out[-1].counts}")
  return out


def run_set(dataset: data_lib.AffinityData, settings: RunSettings, log=print) -> SetResult:
  """Baselines, SAE and the models on one data set."""
  weights_full = np.asarray(kernel.make_target(settings.edges, settings.weights).weights)
  edges = _padded_edges(settings)
  num = len(dataset.labels)
  lam = settings.lam if settings.lam >= 0 else default_config.SHIPPED_LAMBDA.get(
      dataset.name, 2.03e-3)
  randoms, readouts, models = [], {}, []
  for r in range(settings.random_seeds):
    test = evaluate.random_split(num, settings.test_size, settings.seed * 1000 + r)
    readout = evaluate.max_similarity_to_train(dataset.fingerprints, test)
    randoms.append(summary("random", readout, edges, weights_full))
    models += model_scores("random", dataset, test, readout, settings)
    readouts.setdefault("random", readout.tolist())
  log(f"{dataset.name}: random {[s.counts for s in randoms]}")
  baselines = _baselines(dataset, settings, edges, weights_full, log)
  if all(dataset.smiles):
    test = evaluate.scaffold_split(dataset.smiles, settings.test_size)
    readouts["scaffold"] = evaluate.max_similarity_to_train(dataset.fingerprints,
                                                            test).tolist()
  start = time.perf_counter()
  fields, num_seeds = dict(settings.solver), settings.num_seeds
  if dataset.source.startswith("generated"):
    fields["iterations"] = settings.generated_iterations or fields["iterations"]
    num_seeds = settings.generated_seeds or num_seeds
  solver = kernel.Settings(lam=lam, **fields)
  result = splitter.optimise_split(
      dataset.fingerprints, target=kernel.make_target(settings.edges, settings.weights,
                                                      settings.sigma),
      test_size=settings.test_size, settings=solver,
      seed=splitter.label_seed(settings.seed, dataset.name), num_seeds=num_seeds,
      neighbours=settings.neighbours)
  seconds = time.perf_counter() - start
  log(f"{dataset.name}: SAE {result.counts} (score {result.score:.4f}, sum W "
      f"{result.relaxed_test_mass:.1f}, {seconds:.0f} s)")
  readouts["sae"] = result.readout.tolist()
  models += model_scores("sae", dataset, result.test, result.readout, settings)
  return SetResult(
      name=dataset.name, source=dataset.source, num=num, num_test=int(result.test.sum()),
      random=randoms, baselines=baselines,
      sae=summary("sae", result.readout, edges, weights_full),
      sae_relaxed_test_mass=result.relaxed_test_mass,
      sae_test_mass_target=settings.test_size * num,
      sae_best_iteration=result.best_iteration, sae_seed_scores=result.seed_scores,
      table_exact=result.table_exact, table_failures=result.table_failures,
      table_max_error=result.table_max_error,
      models=models, readouts=readouts, solver_seconds=seconds)


def _print(message: str) -> None:
  print(f"[sae_split] {message}", flush=True)


def run(config, workdir: str | pathlib.Path | None = None, *,
        sets: list[data_lib.AffinityData] | None = None, data_dir=None,
        log=_print) -> RunResult:
  """Runs the config's data sets (or the user's own ``sets``).

  Args:
    config: a ``configs/default.py`` config.
    workdir: folder for ``results.json`` (None: nothing written).
    sets: the user's own :class:`data.AffinityData` (``data.from_smiles``); None: the
      config's ``data.sets``.
    data_dir: a folder of official files (``<data_dir>/sae_split/IC50_EGFR.csv``).
    log: progress printer.

  Raises:
    ValueError: a bad config value (before any data is read or anything compiles).
  """
  start = time.perf_counter()
  settings = settings_from_config(config)
  sets = load_sets(config, data_dir, log) if sets is None else list(sets)
  for dataset in sets:
    if len(dataset.labels) < 20:
      raise ValueError(f"sets: {dataset.name} has {len(dataset.labels)} molecules; "
                       "expected at least 20")
  out = [run_set(d, settings, log) for d in sets]
  target = kernel.make_target(settings.edges, settings.weights)
  result = RunResult(config_lib.to_dict(config), np.asarray(target.edges).tolist(),
                     np.asarray(target.weights).tolist(), out, time.perf_counter() - start)
  results.write(result, workdir)
  return result
