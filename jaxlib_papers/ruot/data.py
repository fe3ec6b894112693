"""Snapshot data for DeepRUOT: our gene-network simulator, the CSV loader, hold-out.

A data set is a :class:`Snapshots`: sorted observation times and, per time, the observed
cells ``[n_k, d]`` (counts differ between times: the cell number is the unnormalised mass).
"""

from __future__ import annotations

import csv
import math
import pathlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


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
    ValueError: a bad header, a non-numeric or empty cell (the message names the line and
      column), a NaN/Inf value, a missing expected time, or fewer than 2 times.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"CSV file not found: {path}")
  with path.open(newline="") as handle:
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
      rows.append(values)
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


def simulate_gene_network(
    *,
    num_cells: int = 400,
    times: Sequence[float] = (0.0, 1.0, 2.0, 3.0, 4.0),
    dt: float = 0.01,
    noise: float = 0.05,
    seed: int = 0,
    max_cells: int = 20000,
) -> Snapshots:
  """Our simulator of a two-gene switch with growth (the embedded default data set).

  Genes X1, X2 activate themselves and inhibit each other (Hill functions, exponent 2);
  cells divide at a rate that rises with X2, ``g(x) = g_max X2^2 / (1 + X2^2)``, and a
  division copies the cell. The population starts half near (1.6, 0.3) (cells that will
  switch to the high-X2, dividing state) and half near (0.05, 0.03) (quiescent), in the
  spirit of the paper's synthetic data; the parameters are ours. Every living cell is
  observed at each time in ``times``, so counts grow with the mass.

      dX1 = [a1 h(X1) / (1 + (X2/c)^2) - k1 X1] dt + noise dW1,  h(x) = x^2/(th^2 + x^2)
      dX2 = [a2 h(X2) / (1 + (X1/c)^2) - k2 X2] dt + noise dW2

  Args:
    num_cells: cells at the first time.
    times: increasing observation times (the first is the start).
    dt: Euler-Maruyama step.
    noise: diffusion coefficient of each gene.
    seed: numpy seed (the simulation is deterministic in it).
    max_cells: error out rather than grow without bound.

  Returns:
    :class:`Snapshots` with 2-D cells (values clipped at 0: expression is non-negative).
  """
  times = np.asarray(times, dtype=np.float64)
  if times.ndim != 1 or times.shape[0] < 2 or np.any(np.diff(times) <= 0):
    raise ValueError(f"times must be at least 2 increasing values; got {times}")
  if num_cells < 2 or dt <= 0 or noise < 0:
    raise ValueError(f"need num_cells >= 2, dt > 0, noise >= 0; got {num_cells}, {dt}, {noise}")
  rng = np.random.default_rng(seed)
  a1, k1 = 0.3, 0.6           # X1: weak self-activation, decays unless sustained
  a2, k2 = 2.0, 1.0            # X2: strong self-activation towards a2 / k2
  threshold = 0.25             # Hill threshold of self-activation
  inhibition = 0.8             # X_j at which the inhibition of X_i is half maximal
  g_max = 0.45
  half = num_cells // 2
  x = np.concatenate([
      rng.normal([1.6, 0.3], [0.3, 0.05], size=(half, 2)),      # switching branch
      rng.normal([0.05, 0.03], [0.04, 0.02], size=(num_cells - half, 2)),  # quiescent
  ])
  x = np.clip(x, 0.0, None)

  def drift(x):
    x1, x2 = x[:, 0], x[:, 1]
    act1 = x1**2 / (threshold**2 + x1**2)
    act2 = x2**2 / (threshold**2 + x2**2)
    d1 = a1 * act1 / (1 + (x2 / inhibition) ** 2) - k1 * x1
    d2 = a2 * act2 / (1 + (x1 / inhibition) ** 2) - k2 * x2
    return np.stack([d1, d2], axis=1)
  snapshots = [x.copy()]
  t = times[0]
  for t_next in times[1:]:
    steps = int(round((t_next - t) / dt))
    for _ in range(steps):
      x = x + drift(x) * dt + noise * np.sqrt(dt) * rng.normal(size=x.shape)
      x = np.clip(x, 0.0, None)
      rate = g_max * x[:, 1] ** 2 / (1 + x[:, 1] ** 2)
      divide = rng.random(x.shape[0]) < rate * dt
      if np.any(divide):
        x = np.concatenate([x, x[divide]], axis=0)
      if x.shape[0] > max_cells:
        raise ValueError(f"population exceeded max_cells={max_cells}")
    snapshots.append(x.copy())
    t = t_next
  return validate(Snapshots(times, tuple(s.astype(np.float32) for s in snapshots)))


def growth_rate_truth(x: np.ndarray, g_max: float = 0.45) -> np.ndarray:
  """The simulator's division rate at ``x: [n, 2]`` -> [n] (for plots and checks)."""
  return g_max * x[:, 1] ** 2 / (1 + x[:, 1] ** 2)
