"""The experiment: ``run(config, workdir) -> RunResult``.

The config becomes :class:`Settings` once (:func:`settings_from_config`: links checked
against their Monte Carlo Hermite coefficients, cells parsed, sizes checked) before any
compilation. Then, per dense cell (link, algorithm) and dimension d, ``R`` seeds of online
SGD run as one compiled ``lax.while_loop`` (``kernel.run_online``; seeds on the leading
axis, sharded over the devices when R divides evenly; with the chain engine one program
serves every d of a cell). n*(d) is the median over seeds of the samples to
|<w, theta*>| >= 0.5, a seed that hits the cap counting as a failure (infinite); the slope
is the OLS fit of log n* on log d with a bootstrap interval over seeds. The sparse variant
measures samples to support recovery; stage 2 fits the second layer on a learned w.
The typed :class:`RunResult` goes to ``<workdir>/results.json`` (``core.results``).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
import zlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import distributed, results
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.single_index import kernel, losses
from jaxlib_papers.single_index import links as links_lib
from jaxlib_papers.single_index.configs import default as default_config


class Algorithm(NamedTuple):
  """A dense variant: which label, which degree, whether smoothed."""
  name: str          # "vanilla" | "smoothing" | "lt" | "lt_s"
  use_transform: bool  # T = the link's transform (else y / sd(y))
  degree: int        # p
  smoothed: bool     # lam = d^{1/4}


def algorithm(name: str, link: links_lib.Link) -> Algorithm:
  """The variant ``name`` of the brief for ``link``."""
  k, s = link.information_exponent, link.generative_exponent
  table = {"vanilla": (False, k, False), "smoothing": (False, k, True),
           "lt": (True, s, False), "lt_s": (True, s, s >= 3)}
  if name not in table:
    raise ValueError(f"algorithm must be one of {sorted(table)}, got {name!r}")
  return Algorithm(name, *table[name])


def theory_slope(alg: Algorithm, link: links_lib.Link) -> float:
  """The exponent of d in n* (log factors dropped): vanilla d^{(k*-1) v 1}, smoothing
  d^{k*/2 v 1}, LT d^{(s*-1) v 1}, LT + smoothing d^{s*/2 v 1}."""
  p = alg.degree
  return max(p / 2.0, 1.0) if alg.smoothed else max(p - 1.0, 1.0)


class Cell(NamedTuple):
  name: str          # "<link>_<algorithm>"
  link: links_lib.Link
  algorithm: Algorithm
  dims: tuple[int, ...]
  label_sd: float    # sd(y) by Monte Carlo (vanilla divides y by it)


class Settings(NamedTuple):
  """What a config asks :func:`run` for, checked."""
  seed: int
  num_seeds: int
  engine: str
  chunk: int
  noise_std: float
  thresholds: tuple[float, ...]
  bootstrap: int
  cells: tuple[Cell, ...]
  c_multipliers: tuple[float, ...]
  steps: dict[str, float]
  measured: dict[str, dict[str, list[float]]]   # per link: MC Hermite coefficients


def step_rule(steps: Mapping[str, float], degree: int, smoothed: bool, dim: int,
              multiplier: float = 1.0) -> tuple[float, int]:
  """(eta, cap) at dimension d: c d^{-e} and C d^{f} (configs/default.py)."""
  if smoothed:
    return (multiplier * steps["eta_smoothed"] * dim ** -0.25,
            int(math.ceil(steps["cap_smoothed"] * dim ** 1.5)))
  if degree not in (1, 2, 3, 4):
    raise ValueError(f"no step rule for degree p = {degree} (steps.eta_p1..p4)")
  exponent = 1.0 if degree <= 2 else degree / 2.0
  cap_exponent = 1.0 if degree <= 2 else degree - 1.0
  return (multiplier * steps[f"eta_p{degree}"] * dim ** -exponent,
          int(math.ceil(steps[f"cap_p{degree}"] * dim ** cap_exponent)))


def _cell(name: str, config, known: Mapping[str, links_lib.Link],
          measured: dict) -> Cell:
  link_name, _, alg_name = name.partition("_")
  if link_name not in known:
    raise ValueError(f"config.dense.cells: {name!r} names link {link_name!r}; expected "
                     f"one of {sorted(known)}")
  link = known[link_name]
  alg = algorithm(alg_name, link)
  dims = tuple(config.dense.dims.get(name, config.dense.dims.default))
  if any(int(d) < 4 for d in dims):
    raise ValueError(f"config.dense.dims.{name} = {dims}: expected dimensions >= 4")
  if link_name not in measured:
    m = links_lib.check_link(link, noise_std=float(config.run.noise_std))
    measured[link_name] = {k: np.asarray(v).tolist() for k, v in m._asdict().items()}
  return Cell(name, link, alg, dims, float(measured[link_name]["label_sd"]))


def settings_from_config(config, extra_links: Mapping[str, links_lib.Link] | None = None
                         ) -> Settings:
  """The :class:`Settings` of ``config``; ``extra_links``: the user's own links by name.

  Raises:
    ValueError: a config value that is not allowed (its key named), an unknown link or
      algorithm, or a link whose declared exponents disagree with its measured Hermite
      coefficients (``links.check_link``).
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  known = dict(links_lib.LINKS) | dict(extra_links or {})
  measured: dict = {}
  cells = tuple(_cell(name, config, known, measured) for name in config.dense.cells)
  for link_name in config.sparse.links:
    if link_name not in known:
      raise ValueError(f"config.sparse.links: unknown link {link_name!r}; expected one of "
                       f"{sorted(known)}")
  for d in config.sparse.dims:
    for k in config.sparse.sparsities:
      if int(d) <= int(k):
        raise ValueError(f"config.sparse.dims: d = {d} is not above the sparsity level "
                         f"k = {k} (config.sparse.sparsities)")
  return Settings(int(config.seed), int(config.run.num_seeds), config.run.engine,
                  int(config.run.chunk), float(config.run.noise_std),
                  tuple(float(t) for t in config.run.thresholds), int(config.run.bootstrap),
                  cells, tuple(float(c) for c in config.dense.c_multipliers),
                  dict(config.steps), measured)


# ------------------------------------------------------------------------------ programs


def _print(message: str) -> None:
  print(f"[single_index] {message}", flush=True)


def seed_keys(seed: int, label: str, num_seeds: int) -> jax.Array:
  """[R] typed keys of one run, placed on every device (seed axis sharded) when R divides
  evenly over them."""
  base = jax.random.fold_in(jax.random.key(seed), zlib.crc32(label.encode()) & 0x7FFFFFFF)
  keys = jax.random.split(base, num_seeds)
  mesh = distributed.make_mesh()
  if mesh.size > 1 and num_seeds % mesh.size == 0:   # every process computes all R keys
    data = distributed.shard_batch(np.asarray(jax.random.key_data(keys)), mesh)
    keys = jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys))
  return keys


def to_host(x: jax.Array) -> np.ndarray:
  """A (possibly seed-sharded, multi-process) array gathered on the host."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)


def _transform(cell: Cell):
  if cell.algorithm.use_transform:
    return cell.link.transform
  scale = cell.label_sd
  return lambda y: y / scale


def cell_program(cell: Cell, settings: Settings, max_chunks: int, dim: int | None = None):
  """The jitted run of one cell: ``program(keys [R], d, eta, cap) -> OnlineResult``.

  Chain engine: d, eta and cap are run-time scalars (one program for every d). Full
  engine: ``dim`` is static (pass it), the d argument is ignored.
  """
  alg = cell.algorithm

  def program(keys, d, eta, cap):
    d_static = d if dim is None else dim
    radius = d ** 0.25 if alg.smoothed else 0.0
    step = kernel.StepSettings(cell.link, _transform(cell),
                               losses.Oracle(alg.degree, radius, d_static), eta,
                               noise_std=settings.noise_std)
    spec = kernel.RunSpec(settings.engine, settings.chunk, cap, settings.thresholds)
    return kernel.run_online(step, spec, keys, max_chunks=max_chunks)

  return jax.jit(program)


# ------------------------------------------------------------------------------ statistics


def medians(hits: np.ndarray) -> np.ndarray:
  """Median over seeds (last axis) with failures (-1) as +inf."""
  return np.median(np.where(hits < 0, np.inf, hits).astype(np.float64), axis=-1)


def loglog_slope(xs, ys) -> float:
  """OLS slope of log ys on log xs (NaN when a y is not finite or fewer than 2 points)."""
  ys = np.asarray(ys, np.float64)
  if len(ys) < 2 or not np.all(np.isfinite(ys)):
    return float("nan")
  return float(np.polyfit(np.log(np.asarray(xs, np.float64)), np.log(ys), 1)[0])


def bootstrap_slope(xs, hits: np.ndarray, num: int, seed: int) -> tuple[float, float, float]:
  """(2.5%, 97.5%) of the slope over seed resamples (per x, with replacement), and the
  fraction of resamples whose medians were all finite. hits: [X, R]."""
  if num < 1:
    return float("nan"), float("nan"), 0.0
  rng = np.random.default_rng(seed)
  hits = np.asarray(hits)
  index = rng.integers(0, hits.shape[1], size=(num, *hits.shape))
  resampled = np.take_along_axis(hits[None], index, axis=2)          # [num, X, R]
  slopes = np.array([loglog_slope(xs, m) for m in medians(resampled)])
  finite = slopes[np.isfinite(slopes)]
  if not len(finite):
    return float("nan"), float("nan"), 0.0
  low, high = np.percentile(finite, [2.5, 97.5])
  return float(low), float(high), float(len(finite) / num)


# ------------------------------------------------------------------------------ results


@dataclasses.dataclass(frozen=True)
class CellResult:
  """One (link, algorithm, step multiplier) over its dimensions ([D] lists, D = len(dims))."""
  cell: str
  link: str
  algorithm: str
  degree: int                    # p
  smoothed: bool                 # lam = d^{1/4}
  c_multiplier: float
  theory_slope: float
  dims: list[int]
  eta: list[float]
  cap: list[int]
  hits: list[list[int]]          # [D, R] samples to |m| >= thresholds[0], -1: cap hit
  hits_last: list[list[int]]     # [D, R] samples to |m| >= thresholds[-1] by the stop, -1
  median: list[float]            # [D] n*, inf when half the seeds or more failed
  median_last: list[float]       # [D] the same at thresholds[-1] (censored at the stop)
  failures: list[int]            # [D] seeds that hit the cap
  slope: float                   # OLS of log n* on log d (NaN: a median is inf)
  slope_ci: list[float]          # bootstrap 2.5% / 97.5%
  slope_defined: float           # fraction of bootstrap resamples with finite medians
  compile_seconds: float
  run_seconds: float


@dataclasses.dataclass(frozen=True)
class SparseCellResult:
  """Support selection for one link ([D, K] lists over dims x sparsities)."""
  link: str
  degree: int                    # s*
  dims: list[int]
  sparsities: list[int]
  hits: list[list[list[int]]]    # [D, K, R] first checkpoint with top-k = support, -1
  median: list[list[float]]      # [D, K]
  failures: list[list[int]]      # [D, K]
  slope_k: list[float]           # [D] log n* on log k
  slope_k_ci: list[list[float]]  # [D] bootstrap 2.5% / 97.5%
  d_ratio: list[float]           # [K] n*(d_max) / n*(d_min)
  run_seconds: float


@dataclasses.dataclass(frozen=True)
class Stage2Result:
  """Stage 2 on the full engine: phase 1 (LT, constant eta) to m >= thresholds[0], phase 2
  (eta ~ 1/t) to m >= target, then ridge on random ReLU features of <w_hat, x>."""
  link: str
  dim: int
  phase1_samples: list[int]      # [R] (-1: cap)
  phase2_samples: list[int]      # [R] (-1: cap)
  alignment: list[float]         # [R] |<w_hat, theta*>| at the end
  mse_ratio: list[float]         # [R] test MSE / Var(y), learned w_hat
  random_mse_ratio: list[float]  # [R] the same on a random unit w
  expected_mse_ratio: list[float]  # [R] 1 - m^{2 k*}, the brief's Hermite approximation


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What :func:`run` returns (and writes as ``results.json``)."""
  config: dict[str, Any]
  engine: str
  num_seeds: int
  measured_links: dict[str, dict[str, Any]]   # MC Hermite coefficients per link
  cells: list[CellResult]
  sparse: list[SparseCellResult]
  stage2: Stage2Result | None
  seconds: float


# ------------------------------------------------------------------------------ runs


def run_cell(cell: Cell, settings: Settings, multiplier: float = 1.0,
             log=_print) -> CellResult:
  """Every d of one cell: R seeds each, n* medians, the slope and its interval."""
  alg = cell.algorithm
  rules = [step_rule(settings.steps, alg.degree, alg.smoothed, d, multiplier)
           for d in cell.dims]
  max_chunks = -(-max(cap for _, cap in rules) // settings.chunk)
  programs: dict = {}
  hits, last, compile_s, run_s = [], [], 0.0, 0.0
  for d, (eta, cap) in zip(cell.dims, rules):
    static = d if settings.engine == "full" else None
    keys = seed_keys(settings.seed, f"{cell.name}/{multiplier:g}/{d}", settings.num_seeds)
    args = (keys, jnp.float32(d), jnp.float32(eta), jnp.int32(cap))
    start = time.perf_counter()
    if static not in programs:   # the chain compiles once for every d
      programs[static] = cell_program(cell, settings, max_chunks, static).lower(
          *args).compile()
      compile_s += time.perf_counter() - start
      start = time.perf_counter()
    out = jax.block_until_ready(programs[static](*args))
    run_s += time.perf_counter() - start
    out_hits = to_host(out.hits)
    hits.append(out_hits[:, 0])
    last.append(out_hits[:, -1])
    log(f"{cell.name} c x{multiplier:g} d={d}: n* {medians(hits[-1]):.0f} "
        f"(cap {cap}, {int((hits[-1] < 0).sum())}/{settings.num_seeds} at the cap)")
  return _cell_result(cell, settings, multiplier, rules, (hits, last, compile_s, run_s))


def _cell_result(cell, settings, multiplier, rules, measured) -> CellResult:
  hits, last, compile_s, run_s = measured
  hits, last = np.stack(hits), np.stack(last)
  med = medians(hits)
  low, high, defined = bootstrap_slope(cell.dims, hits, settings.bootstrap,
                                       settings.seed + zlib.crc32(cell.name.encode()))
  return CellResult(
      cell=cell.name, link=cell.link.name, algorithm=cell.algorithm.name,
      degree=cell.algorithm.degree, smoothed=cell.algorithm.smoothed,
      c_multiplier=multiplier, theory_slope=theory_slope(cell.algorithm, cell.link),
      dims=list(cell.dims), eta=[r[0] for r in rules], cap=[r[1] for r in rules],
      hits=hits.tolist(), hits_last=last.tolist(), median=med.tolist(),
      median_last=medians(last).tolist(), failures=(hits < 0).sum(1).tolist(),
      slope=loglog_slope(cell.dims, med), slope_ci=[low, high], slope_defined=defined,
      compile_seconds=compile_s, run_seconds=run_s)


def _support_program(link: links_lib.Link, dim: int, config, settings: Settings):
  """The jitted selection at dimension d: ``program(keys [R], k) -> SparseResult`` (one
  program for every k)."""
  spec = config.sparse
  cps = kernel.checkpoints(int(spec.first_checkpoint), float(spec.growth), int(spec.cap),
                           int(spec.chunk))

  def program(keys, sparsity):
    sparse = kernel.SparseSettings(link, link.transform, link.generative_exponent,
                                   sparsity, dim, settings.noise_std, int(spec.chunk), cps)
    return kernel.run_support(sparse, keys)

  return jax.jit(program), cps[-1]


def run_sparse(link: links_lib.Link, config, settings: Settings, log=_print
               ) -> SparseCellResult:
  """Samples to support recovery for every (d, k) of ``config.sparse`` (k up to the
  link's ``max_sparsity``); slopes in log k per d and the d ratios per k."""
  spec = config.sparse
  limit = int(spec.max_sparsity.get(link.name, max(spec.sparsities)))
  ks = [int(k) for k in spec.sparsities if int(k) <= limit]
  hits, start = [], time.perf_counter()
  for d in spec.dims:
    program, cap = _support_program(link, int(d), config, settings)
    row = []
    for k in ks:
      keys = seed_keys(settings.seed, f"sparse/{link.name}/{d}/{k}", int(spec.num_seeds))
      row.append(to_host(program(keys, jnp.int32(k)).hits))
      log(f"sparse {link.name} d={d} k={k}: n* {medians(row[-1]):.0f} "
          f"({int((row[-1] < 0).sum())}/{int(spec.num_seeds)} at the cap {cap})")
    hits.append(np.stack(row))
  hits = np.stack(hits)                                  # [D, K, R]
  med = medians(hits)
  intervals = [bootstrap_slope(ks, h, settings.bootstrap, settings.seed)[:2] for h in hits]
  return SparseCellResult(
      link=link.name, degree=link.generative_exponent, dims=[int(d) for d in spec.dims],
      sparsities=ks, hits=hits.tolist(), median=med.tolist(),
      failures=(hits < 0).sum(-1).tolist(),
      slope_k=[loglog_slope(ks, m) for m in med], slope_k_ci=[list(i) for i in intervals],
      d_ratio=(med[-1] / med[0]).tolist(), run_seconds=time.perf_counter() - start)


def _stage1_program(link: links_lib.Link, dim: int, settings: Settings, cap: int):
  """Both phases of stage 1 as one jitted program (full engine, the link's LT):
  ``program(keys, w0 [R, d], eta, tau, threshold) -> OnlineResult``."""
  chunk = min(settings.chunk, cap)

  def program(keys, initial, eta, decay, threshold):
    step = kernel.StepSettings(link, link.transform,
                               losses.Oracle(link.generative_exponent, 0.0, dim), eta,
                               decay, settings.noise_std)
    spec = kernel.RunSpec("full", chunk, cap, threshold[None])
    return kernel.run_online(step, spec, keys, initial=initial)

  return jax.jit(program)


def run_stage2(config, settings: Settings, known: Mapping[str, links_lib.Link]
               ) -> Stage2Result:
  """Stage 1 (phase 1: constant eta to thresholds[0]; phase 2: eta ~ 1/t to the target),
  full engine at d = stage2.dim, then the second layer (ridge, float64)."""
  spec = config.stage2
  link, d = known[spec.link], int(spec.dim)
  num_seeds, cap = int(spec.num_seeds), int(math.ceil(spec.cap * d))
  program = _stage1_program(link, d, settings, cap)
  keys = seed_keys(settings.seed, "stage2", num_seeds)
  w0 = jax.jit(jax.vmap(lambda k: kernel.uniform_sphere(k, d)))(keys)
  eta = jnp.float32(float(spec.eta) / d)
  first = program(seed_keys(settings.seed, "stage2/phase1", num_seeds), w0, eta,
                  jnp.float32(jnp.inf), jnp.float32(settings.thresholds[0]))
  second = program(seed_keys(settings.seed, "stage2/phase2", num_seeds), first.params, eta,
                   jnp.float32(float(spec.decay) * d), jnp.float32(spec.target))
  ridge = kernel.RidgeSettings(int(spec.num_features), int(spec.num_train),
                               int(spec.num_test), float(spec.ridge))
  step = kernel.StepSettings(link, link.transform, losses.Oracle(1, 0.0, d), 1.0,
                             noise_std=settings.noise_std)
  with enable_x64():
    fit = jax.jit(jax.vmap(lambda w, k: kernel.second_layer_fit(w, k, step, ridge)))
    fit_keys = jax.random.split(jax.random.key(settings.seed + 1), num_seeds)
    w_random = jax.vmap(lambda k: kernel.uniform_sphere(k, d))(
        jax.random.split(jax.random.key(settings.seed + 2), num_seeds))
    w_both = jnp.concatenate([jnp.asarray(to_host(second.params)), w_random]).astype(
        jnp.float64)
    ratios = np.asarray(fit(w_both, jnp.concatenate([fit_keys, fit_keys])))
  alignment = to_host(second.alignment).astype(np.float64)
  return Stage2Result(
      link=link.name, dim=d, phase1_samples=to_host(first.hits)[:, 0].tolist(),
      phase2_samples=to_host(second.hits)[:, 0].tolist(), alignment=alignment.tolist(),
      mse_ratio=ratios[:num_seeds].tolist(), random_mse_ratio=ratios[num_seeds:].tolist(),
      expected_mse_ratio=(1.0 - alignment ** (2 * link.information_exponent)).tolist())


def run(config, workdir: str | pathlib.Path | None = None, *,
        links: Mapping[str, links_lib.Link] | None = None, log=_print) -> RunResult:
  """Runs the config's dense cells, sparse links and stage 2.

  Args:
    config: a ``configs/default.py`` config.
    workdir: folder for ``results.json`` (None: nothing written).
    links: the user's own links by name (usable in ``dense.cells``, ``sparse.links`` and
      ``stage2.link``), each checked against its Monte Carlo Hermite coefficients.
    log: progress printer.

  Raises:
    ValueError: a bad config value or link (before anything compiles).
  """
  start = time.perf_counter()
  settings = settings_from_config(config, links)
  known = dict(links_lib.LINKS) | dict(links or {})
  if config.stage2.enabled and config.stage2.link not in known:
    raise ValueError(f"config.stage2.link: unknown link {config.stage2.link!r}")
  cells = [run_cell(cell, settings, c, log) for cell in settings.cells
           for c in settings.c_multipliers]
  sparse = [run_sparse(known[name], config, settings, log) for name in config.sparse.links]
  stage2 = run_stage2(config, settings, known) if config.stage2.enabled else None
  result = RunResult(config_lib.to_dict(config), settings.engine, settings.num_seeds,
                     settings.measured, cells, sparse, stage2,
                     time.perf_counter() - start)
  results.write(result, workdir)
  return result
