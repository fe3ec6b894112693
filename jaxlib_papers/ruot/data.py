"""Snapshot data for DeepRUOT: our gene-network simulator, the CSV loader, hold-out.

A data set is a :class:`Snapshots`: sorted observation times and, per time, the observed
cells ``[n_k, d]`` (counts differ between times: the cell number is the unnormalised mass).
"""

from __future__ import annotations

import csv
import functools
import math
import pathlib
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng


class Snapshots(NamedTuple):
  """Unpaired, unnormalised snapshots of a cell population.

  Attributes:
    times: [K] strictly increasing observation times.
    xs: K arrays, ``xs[k]: [n_k, d]`` float32 cells observed at ``times[k]``.
  """
  times: np.ndarray
  xs: tuple[np.ndarray, ...]

  @property
  def dim(self) -> int:
    return int(self.xs[0].shape[1])

  @property
  def counts(self) -> np.ndarray:
    return np.array([x.shape[0] for x in self.xs])

  @property
  def relative_mass(self) -> np.ndarray:
    """[K] N_k / N_0, the mass targets implied by the cell counts."""
    counts = self.counts
    return counts / counts[0]


def validate(snapshots: Snapshots) -> Snapshots:
  """Checks shapes, ordering and finiteness; returns float32 copies.

  Raises:
    ValueError: fewer than 2 times, unsorted times, empty or non-finite snapshots, or
      snapshots of different dimensions.
  """
  times = np.asarray(snapshots.times, dtype=np.float64)
  if times.ndim != 1 or times.shape[0] < 2:
    raise ValueError(f"snapshots.times must hold at least 2 times; got shape {times.shape}")
  if len(snapshots.xs) != times.shape[0]:
    raise ValueError(f"snapshots.xs has {len(snapshots.xs)} arrays for {times.shape[0]} times")
  if np.any(np.diff(times) <= 0):
    raise ValueError(f"snapshots.times must be strictly increasing; got {times.tolist()}")
  xs = []
  for k, x in enumerate(snapshots.xs):
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] == 0:
      raise ValueError(f"snapshot at t={times[k]:g} must be a non-empty [n, d] array; "
                       f"got shape {x.shape}")
    if x.shape[1] != np.asarray(snapshots.xs[0]).shape[1]:
      raise ValueError(f"snapshot at t={times[k]:g} has dimension {x.shape[1]}, expected "
                       f"{np.asarray(snapshots.xs[0]).shape[1]}")
    if not np.all(np.isfinite(x)):
      raise ValueError(f"snapshot at t={times[k]:g} contains NaN or Inf")
    xs.append(x)
  return Snapshots(times, tuple(xs))


def _parse_row(path: pathlib.Path, header: list[str], line_no: int, row: list[str]
               ) -> list[float]:
  """The finite numbers of one CSV row (the error names the line and column)."""
  values = []
  for column, cell in zip(header, row):
    try:
      value = float(cell)
    except ValueError:
      raise ValueError(f"{path}: line {line_no}, column {column!r}: {cell!r} is not a "
                       "number") from None
    if not math.isfinite(value):
      raise ValueError(f"{path}: line {line_no}, column {column!r} is {cell!r} "
                       "(NaN/Inf rows are not allowed)")
    values.append(value)
  return values


def load_csv(path: str | pathlib.Path, *, expected_times: Sequence[float] | None = None
             ) -> Snapshots:
  """Loads the ``samples,x1,...,xd`` CSV format (``samples`` = observation time).

  Args:
    path: CSV file with a header row whose first column is ``samples``.
    expected_times: if given, every one of these times must be present.

  Returns:
    Validated :class:`Snapshots` sorted by time.

  Raises:
    FileNotFoundError: ``path`` does not exist.
    ValueError: not UTF-8 text (a binary file), a bad header, a non-numeric or empty cell
      (the message names the line and column), a NaN/Inf value, a missing expected time,
      or fewer than 2 times.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"CSV file not found: {path}")
  try:
    return _read_csv(path, expected_times)
  except UnicodeDecodeError as error:
    raise ValueError(f"{path}: not a UTF-8 text CSV (byte {error.start} is "
                     f"{error.object[error.start:error.start + 1]!r}); expected the "
                     "'samples,x1,...,xd' format with a header row") from None


def _read_csv(path: pathlib.Path, expected_times: Sequence[float] | None) -> Snapshots:
  with path.open(newline="", encoding="utf-8") as handle:
    reader = csv.reader(handle)
    try:
      header = [h.strip() for h in next(reader)]
    except StopIteration:
      raise ValueError(f"{path}: empty file, expected a header 'samples,x1,...'") from None
    if not header or header[0] != "samples" or len(header) < 2:
      raise ValueError(f"{path}: header must start with 'samples' followed by at least one "
                       f"feature column; got {header[:5]}")
    rows = []
    for line_no, row in enumerate(reader, start=2):
      if not row or all(not cell.strip() for cell in row):
        continue  # blank lines carry nothing
      if len(row) != len(header):
        raise ValueError(f"{path}: line {line_no} has {len(row)} cells, expected "
                         f"{len(header)}")
      rows.append(_parse_row(path, header, line_no, row))
  if not rows:
    raise ValueError(f"{path}: no data rows")
  table = np.asarray(rows, dtype=np.float64)
  times = np.unique(table[:, 0])
  if expected_times is not None:
    missing = [t for t in expected_times if not np.any(np.isclose(times, t))]
    if missing:
      raise ValueError(f"{path}: expected times {list(expected_times)}, missing {missing} "
                       f"(found {times.tolist()})")
  if times.shape[0] < 2:
    raise ValueError(f"{path}: need at least 2 distinct times in 'samples'; found "
                     f"{times.tolist()}")
  xs = tuple(table[table[:, 0] == t, 1:].astype(np.float32) for t in times)
  return validate(Snapshots(times, xs))


def hold_out(snapshots: Snapshots, index: int | None) -> Snapshots:
  """Removes time point ``index`` (None or negative: keep all) from the training data.

  Raises:
    ValueError: ``index`` is 0 (the initial snapshot seeds every trajectory) or out of range.
  """
  if index is None or index < 0:
    return snapshots
  num_times = len(snapshots.xs)
  if not 0 < index < num_times:
    raise ValueError(f"hold_out must be in 1..{num_times - 1} (time 0 is the initial "
                     f"condition); got {index}")
  keep = [k for k in range(num_times) if k != index]
  return Snapshots(snapshots.times[keep], tuple(snapshots.xs[k] for k in keep))


class GeneNetwork(NamedTuple):
  """Parameters of the two-gene network with division (defaults: fitted to the paper's CSV).

  Drift (Hill exponent 2; the form and numbers are ours, fitted to the official data, see
  ``seeds/ruot.md``):

      f1(x) = a1 x1^2 c^2 / (c^2 + x2^2) + d x2^2 / (1 + x2^2) - k1 x1
      f2(x) = b2 + a2 x2^2 / (s^2 + x2^2) + e x1^2 - k2 x2

  X1 activates itself (repressed by X2) and X2; X2 activates itself and, weakly, X1. Noise
  ``eta_i dW_i``; a cell divides at rate ``g(x) = alpha_g x2^2 / (1 + x2^2)`` into two
  copies of itself. At t = 0 a fraction ``init_fraction`` of the cells is
  ``N(init_mean, init_std^2 I)`` (the X1-high cells that switch X2 on and divide), the
  rest ``N(0, init_std^2 I)`` (quiescent); expression is clipped at 0 throughout.
  """
  a1: float = 0.89
  c: float = 0.37
  d: float = 0.445
  k1: float = 0.977
  b2: float = 0.052
  a2: float = 5.98
  s: float = 1.237
  e: float = 0.25
  k2: float = 2.154
  noise: tuple[float, float] = (0.08, 0.08)               # eta_i
  division: float = 0.55                                  # alpha_g
  init_mean: tuple[float, float] = (2.0, 0.2)
  init_std: float = 0.1
  init_fraction: float = 0.5


def gene_drift(x, params: GeneNetwork):
  """The network's drift at ``x: [n, 2]`` -> ``[n, 2]`` (jnp)."""
  p = params
  x1, x2 = x[:, 0], x[:, 1]
  f1 = p.a1 * x1**2 * p.c**2 / (p.c**2 + x2**2) + p.d * x2**2 / (1 + x2**2) - p.k1 * x1
  f2 = p.b2 + p.a2 * x2**2 / (p.s**2 + x2**2) + p.e * x1**2 - p.k2 * x2
  return jnp.stack([f1, f2], axis=1)


def gene_division_rate(x, params: GeneNetwork):
  """Division rate ``alpha_g x2^2 / (1 + x2^2)`` at ``x: [n, 2]`` -> ``[n]`` (jnp)."""
  x2 = x[:, 1]
  return params.division * x2**2 / (1.0 + x2**2)


class _Population(NamedTuple):
  x: object        # [capacity, 2] float32 expression (free slots hold stale values)
  alive: object    # [capacity] bool, slot holds a living cell
  overflow: object  # [] bool, a division found no free slot


def _em_step(pop: _Population, key, params: GeneNetwork, dt: float) -> _Population:
  """One Euler-Maruyama step of every cell, then divisions into free slots."""
  noise_key, divide_key = jax.random.split(key)
  eta = jnp.asarray(params.noise, pop.x.dtype)
  x = pop.x + gene_drift(pop.x, params) * dt + eta * jnp.sqrt(dt) * prng.normal(
      noise_key, pop.x.shape, pop.x.dtype)
  x = jnp.maximum(x, 0.0)
  divide = pop.alive & (prng.uniform(divide_key, pop.alive.shape)
                        < gene_division_rate(x, params) * dt)
  free = ~pop.alive
  num_divide = jnp.sum(divide)
  free_rank = jnp.cumsum(free) - 1            # rank of each free slot among the free slots
  # The daughter of the r-th dividing cell goes to the r-th free slot.
  source = jnp.searchsorted(jnp.cumsum(divide), free_rank + 1, side="left")
  born = free & (free_rank < num_divide)
  x = jnp.where(born[:, None], x[jnp.clip(source, 0, x.shape[0] - 1)], x)
  return _Population(x, pop.alive | born, pop.overflow | (num_divide > jnp.sum(free)))


@functools.partial(jax.jit, static_argnames=("num_cells", "num_switch", "steps", "dt",
                                             "capacity"))
def simulate_gene_population(key, params: GeneNetwork, *, num_cells: int, num_switch: int,
                             steps: tuple[int, ...], dt: float, capacity: int):
  """Pure JAX simulation of the population (``params.init_fraction`` is unused here).

  Args:
    key: typed PRNG key.
    params: :class:`GeneNetwork` (floats or arrays).
    num_cells: cells at the first time.
    num_switch: of those, cells started at ``params.init_mean`` (the rest at 0).
    steps: Euler-Maruyama steps of each observation interval (K - 1 ints).
    dt: step size.
    capacity: slots for living cells (the population may not exceed it).

  Returns:
    ``(x, alive, overflow)``: ``x: [K, capacity, 2]`` cells at the K times, ``alive:
    [K, capacity]`` bool which slots hold cells, ``overflow: []`` bool (capacity too small).
  """
  init_key, key = jax.random.split(key)
  mean = jnp.concatenate([
      jnp.broadcast_to(jnp.asarray(params.init_mean, jnp.float32), (num_switch, 2)),
      jnp.zeros((num_cells - num_switch, 2), jnp.float32)])
  x0 = jnp.maximum(mean + params.init_std * prng.normal(init_key, mean.shape), 0.0)
  x = jnp.zeros((capacity, 2), jnp.float32).at[:num_cells].set(x0)
  alive = jnp.arange(capacity) < num_cells
  pop = _Population(x, alive, jnp.asarray(False))
  xs, alives = [pop.x], [pop.alive]
  for interval, num_steps in enumerate(steps):
    keys = jax.random.split(jax.random.fold_in(key, interval), int(num_steps))
    pop, _ = jax.lax.scan(lambda p, k: (_em_step(p, k, params, dt), None), pop, keys)
    xs.append(pop.x)
    alives.append(pop.alive)
  return jnp.stack(xs), jnp.stack(alives), pop.overflow


def simulate_gene_network(
    key=None,
    *,
    num_cells: int = 400,
    times: Sequence[float] = (0.0, 1.0, 2.0, 3.0, 4.0),
    dt: float = 0.01,
    noise: float | None = None,
    seed: int = 0,
    params: GeneNetwork | None = None,
    max_cells: int | None = None,
) -> Snapshots:
  """Simulates the paper's synthetic gene data set (same layout as :func:`load_csv`).

  Two genes with self-activation and mutual repression, noise, and division at a rate
  rising with X2 (:class:`GeneNetwork`); Euler-Maruyama in ``lax.scan``, each division a
  new particle (a copy of its mother), every living cell observed at each time (so the
  counts are the unnormalised mass). The defaults reproduce the statistics of the
  official ``simulation_gene_data.csv`` (400 cells at t = 0..4); ``seeds/ruot.md`` says
  which parameters come from the file and how they were fitted.

  Args:
    key: typed PRNG key (``jax.random.key``); None: ``jax.random.key(seed)``.
    num_cells: cells at the first time.
    times: increasing observation times (the first is the start).
    dt: Euler-Maruyama step.
    noise: if given, the noise eta of both genes (else ``params.noise``).
    seed: used only when ``key`` is None.
    params: network parameters (default :class:`GeneNetwork`).
    max_cells: slots for the growing population (default ``8 * num_cells``).

  Returns:
    Validated :class:`Snapshots` of float32 ``[n_k, 2]`` cells.

  Raises:
    ValueError: bad times, ``num_cells < 2``, ``dt <= 0``, negative noise, or a population
      that outgrew ``max_cells``.
  """
  times = np.asarray(times, dtype=np.float64)
  if times.ndim != 1 or times.shape[0] < 2 or np.any(np.diff(times) <= 0):
    raise ValueError(f"times must be at least 2 increasing values; got {times}")
  if num_cells < 2 or dt <= 0:
    raise ValueError(f"need num_cells >= 2 and dt > 0; got num_cells={num_cells}, dt={dt}")
  params = GeneNetwork() if params is None else params
  if noise is not None:
    if noise < 0:
      raise ValueError(f"noise must be >= 0; got {noise}")
    params = params._replace(noise=(float(noise), float(noise)))
  capacity = int(max_cells) if max_cells is not None else 8 * int(num_cells)
  if capacity < num_cells:
    raise ValueError(f"max_cells={max_cells} is below num_cells={num_cells}")
  steps = tuple(int(round(d / dt)) for d in np.diff(times))
  key = jax.random.key(seed) if key is None else key
  num_switch = int(round(float(params.init_fraction) * num_cells))
  xs, alive, overflow = simulate_gene_population(
      key, params, num_cells=int(num_cells), num_switch=num_switch, steps=steps, dt=float(dt),
      capacity=capacity)
  if bool(overflow):
    raise ValueError(f"the population exceeded max_cells={capacity}; raise max_cells")
  xs, alive = np.asarray(xs), np.asarray(alive)
  return validate(Snapshots(times, tuple(x[a] for x, a in zip(xs, alive))))


def growth_rate_truth(x: np.ndarray, params: GeneNetwork | None = None) -> np.ndarray:
  """The simulator's division rate at ``x: [n, 2]`` -> [n] (numpy, for plots and checks)."""
  params = GeneNetwork() if params is None else params
  x2 = np.asarray(x)[:, 1]
  return params.division * x2**2 / (1 + x2**2)
