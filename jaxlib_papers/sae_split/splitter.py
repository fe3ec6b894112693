"""The user-facing splitter: ``SimilarityHistogramSplit(...).split(X)`` (scikit-learn style).

``X`` is [N, B] 0/1 fingerprints (Tanimoto computed here, in blocks) or, with
``metric="precomputed"``, an [N, N] similarity matrix in [0, 1] (symmetric; its diagonal
is ignored). Every argument is checked before any optimisation.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import distributed
from jaxlib_papers.sae_split import evaluate, kernel


@dataclasses.dataclass(frozen=True)
class SplitResult:
  """One optimised split (host arrays)."""
  test: np.ndarray            # [N] bool test mask
  counts: list[int]           # [K] test counts per target bin (exact readout, with padding)
  readout: np.ndarray         # [n_test] exact max similarity to train, row order
  score: float                # -mean_k |n_k / n_test - E_k|
  relaxed_test_mass: float    # sum_i W_i at the kept iterate (target a N)
  best_iteration: int         # iteration of the kept binarisation
  seed_scores: list[float]    # [R] each seed's best table score
  table_exact: bool           # every test row has a training sample in its table
  table_failures: int         # test rows without one
  table_max_error: float      # max |r_table - r_exact| over test rows
  edges: list[float]          # [K + 1] with padding
  weights: list[float]        # [K]


def check_target(edges: Sequence[float], weights: Sequence[float] | None,
                 test_size: float) -> tuple[np.ndarray, np.ndarray]:
  """(edges [K + 1], weights [K]) checked; weights None: uniform.

  Raises:
    ValueError: edges not increasing in [0, 1], weights of the wrong length, negative or
      not summing to 1, a test fraction outside (0, 1).
  """
  edges = np.asarray(edges, np.float64)
  if edges.ndim != 1 or len(edges) < 2 or not np.all(np.isfinite(edges)):
    raise ValueError(f"bins: expected at least 2 finite bin edges, got {edges.tolist()}")
  if edges.min() < 0 or edges.max() > 1:
    raise ValueError(f"bins: every edge must lie in [0, 1] (similarities), got "
                     f"{edges.tolist()}")
  if np.any(np.diff(edges) <= 0):
    raise ValueError(f"bins: edges must increase strictly, got {edges.tolist()}")
  k = len(edges) - 1
  weights = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, np.float64)
  if weights.shape != (k,):
    raise ValueError(f"weights: expected {k} weights (one per bin of {edges.tolist()}), "
                     f"got shape {weights.shape}")
  if np.any(weights < 0) or abs(weights.sum() - 1.0) > 1e-6:
    raise ValueError(f"weights: expected non-negative weights that sum to 1, got "
                     f"{weights.tolist()} (sum {weights.sum():.6g})")
  if not 0.0 < float(test_size) < 1.0:
    raise ValueError(f"test_size: expected a fraction in (0, 1), got {test_size}")
  return edges, weights


def check_fingerprints(x) -> np.ndarray:
  """[N, B] 0/1 fingerprints as uint8, or a ValueError naming what is wrong."""
  x = np.asarray(x)
  if x.ndim != 2 or x.shape[0] < 3:
    raise ValueError(f"X: expected [N, B] fingerprints with N >= 3, got shape {x.shape}")
  if not np.all((x == 0) | (x == 1)):
    raise ValueError("X: expected 0/1 fingerprint bits (or metric='precomputed' for a "
                     "similarity matrix)")
  return x.astype(np.uint8)


def check_similarity(s) -> np.ndarray:
  """[N, N] float32 similarity, or a ValueError: not square, not symmetric, outside [0, 1]."""
  s = np.asarray(s, np.float64)
  if s.ndim != 2 or s.shape[0] != s.shape[1] or s.shape[0] < 3:
    raise ValueError(f"X: a precomputed similarity must be a square [N, N] matrix (N >= 3),"
                     f" got shape {s.shape}")
  if not np.all(np.isfinite(s)):
    raise ValueError("X: the similarity matrix holds NaN or Inf")
  off = s[~np.eye(len(s), dtype=bool)]
  if off.min() < 0 or off.max() > 1:
    raise ValueError(f"X: similarities must lie in [0, 1], got [{off.min():.3g}, "
                     f"{off.max():.3g}]")
  asym = float(np.max(np.abs(s - s.T)))
  if asym > 1e-6:
    raise ValueError(f"X: the similarity matrix must be symmetric (max |S - S^T| = "
                     f"{asym:.3g})")
  return s.astype(np.float32)


def seed_states(problem: kernel.Problem, settings: kernel.Settings, seed: int,
                num_seeds: int) -> kernel.SolverState:
  """[R] initial states, the seed axis sharded over the devices when R divides evenly."""
  keys = jax.random.split(jax.random.key(seed), num_seeds)
  states = _init_program(keys, problem, settings, num_seeds)
  mesh = distributed.make_mesh()
  if mesh.size > 1 and num_seeds % mesh.size == 0:
    states = distributed.shard_batch(jax.device_get(states), mesh)
  return states


@functools.partial(jax.jit, static_argnums=(2, 3))
def _solve_program(states, problem, settings, rounds):
  return jax.vmap(kernel.solve, in_axes=(0, None, None, None))(states, problem, settings,
                                                               rounds)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _init_program(keys, problem, settings, num_seeds):
  del num_seeds
  return jax.vmap(kernel.init_state, in_axes=(0, None, None))(keys, problem, settings)


_table_program = jax.jit(kernel.neighbour_table, static_argnums=(1, 2))


def solve_seeds(problem: kernel.Problem, settings: kernel.Settings, seed: int,
                num_seeds: int) -> kernel.SolverState:
  """R seeds of :func:`kernel.solve`, vmapped, one compiled program."""
  rounds = -(-settings.iterations // settings.log_every)
  states = seed_states(problem, settings, seed, num_seeds)
  return jax.block_until_ready(_solve_program(states, problem, settings, rounds))


def make_problem(table: tuple[jax.Array, jax.Array], target: kernel.Target,
                 test_size: float) -> kernel.Problem:
  num = int(table[0].shape[0])
  return kernel.Problem(table[0], table[1], target, jnp.float32(test_size * num),
                        jnp.int32(int((1.0 - test_size) * num)))


def finish(problem: kernel.Problem, states: kernel.SolverState, exact_readout
           ) -> SplitResult:
  """The best seed's kept binarisation, read out exactly by ``exact_readout(test)``."""
  scores = np.asarray(states.best_score)
  best = int(np.argmax(scores))
  logits = states.best_logits[best]
  _, _, test = kernel.evaluate(logits, problem)
  test = np.asarray(test)
  table_r = np.asarray(kernel.hard_readout(jnp.asarray(test), problem.values,
                                           problem.index))[test]
  readout = exact_readout(test)
  edges = np.asarray(problem.target.edges, np.float64)
  weights = np.asarray(problem.target.weights, np.float64)
  test_counts = evaluate.counts(readout, edges)
  return SplitResult(
      test=test, counts=test_counts.tolist(), readout=readout,
      score=-evaluate.l1_to_target(test_counts, weights),
      relaxed_test_mass=float(jax.nn.sigmoid(logits).sum()),
      best_iteration=int(states.best_iteration[best]), seed_scores=scores.tolist(),
      table_exact=bool(kernel.table_condition(jnp.asarray(test), problem.index)),
      table_failures=int(kernel.table_failures(jnp.asarray(test), problem.index)),
      table_max_error=float(np.max(np.abs(table_r - readout))),
      edges=edges.tolist(), weights=weights.tolist())


def optimise_split(x, *, target: kernel.Target, test_size: float,
                   settings: kernel.Settings, seed: int = 0, num_seeds: int = 2,
                   neighbours: int = 128, precomputed: bool = False) -> SplitResult:
  """SAE's split of ``x`` (checked fingerprints or similarity) to ``target``."""
  if precomputed:
    s = jnp.asarray(x)
    table = kernel.dense_table(s)
    if neighbours and neighbours < len(x):
      values, index = jax.lax.top_k(table[0] + jnp.where(jnp.eye(len(x)) > 0, -1.0, 0.0),
                                    neighbours)
      table = (jnp.maximum(values, 0.0), index.astype(jnp.int32))
    masked = np.where(np.eye(len(x), dtype=bool), -np.inf, np.asarray(x))

    def exact(test):
      return masked[np.ix_(test, ~test)].max(1).astype(np.float64)
  else:
    k = int(neighbours) if neighbours and neighbours < len(x) else len(x)
    table = _table_program(jnp.asarray(x), k, min(512, len(x)))

    def exact(test):
      return evaluate.max_similarity_to_train(x, test)
  problem = make_problem(table, target, test_size)
  return finish(problem, solve_seeds(problem, settings, seed, num_seeds), exact)


class SimilarityHistogramSplit:
  """Train/test splits whose test set fits a histogram of max-similarity-to-train.

  ``split(X)`` yields ``(train_index, test_index)`` (sorted int arrays partitioning
  ``range(N)``) for ``n_splits`` independent solver seeds. ``X``: [N, B] 0/1 fingerprints
  (Tanimoto), or [N, N] similarities with ``metric="precomputed"``.

  Args:
    bins: bin edges b_0 < ... < b_K in [0, 1].
    weights: [K] target fractions E_k, sum 1 (None: uniform).
    test_size: a in (0, 1); n_test = N - int((1 - a) N).
    seed: the first solver seed.
    n_splits: how many splits ``split`` yields (seeds seed, seed + 1, ...).
    solver: :class:`kernel.Settings` (default: the brief's CPU plan, lr 0.1, 5k
      iterations, the EGFR lambda).
    neighbours: k of the readout's table (0: dense).
    metric: "tanimoto" | "precomputed".
  """

  def __init__(self, bins=(0.0, 1 / 3, 2 / 3, 1.0), weights=None, test_size: float = 0.2,
               seed: int = 0, n_splits: int = 1, solver: kernel.Settings | None = None,
               neighbours: int = 128, metric: str = "tanimoto"):
    self.edges, self.weights = check_target(bins, weights, test_size)
    if metric not in ("tanimoto", "precomputed"):
      raise ValueError(f"metric: expected 'tanimoto' or 'precomputed', got {metric!r}")
    if int(n_splits) < 1 or int(neighbours) < 0:
      raise ValueError(f"n_splits >= 1 and neighbours >= 0 expected, got {n_splits}, "
                       f"{neighbours}")
    self.test_size, self.seed, self.n_splits = float(test_size), int(seed), int(n_splits)
    self.solver = solver or kernel.Settings(lr=0.1, dual_lr=0.1, iterations=5000)
    self.neighbours, self.metric = int(neighbours), metric
    self.results_: list[SplitResult] = []

  def get_n_splits(self, X=None, y=None, groups=None) -> int:  # noqa: N803  (sklearn)
    del X, y, groups
    return self.n_splits

  def split(self, X, y=None, groups=None) -> Iterator[tuple[np.ndarray, np.ndarray]]:  # noqa: N803
    del y, groups
    precomputed = self.metric == "precomputed"
    x = check_similarity(X) if precomputed else check_fingerprints(X)
    target = kernel.make_target(self.edges, self.weights, 0.1)
    self.results_ = []
    for i in range(self.n_splits):
      result = optimise_split(x, target=target, test_size=self.test_size,
                              settings=self.solver, seed=self.seed + i,
                              neighbours=self.neighbours, precomputed=precomputed)
      self.results_.append(result)
      yield np.flatnonzero(~result.test), np.flatnonzero(result.test)


def label_seed(seed: int, label: str) -> int:
  """A seed of its own for ``label`` (a data set's name) under the run's seed."""
  return (seed * 1_000_003 + zlib.crc32(label.encode())) & 0x7FFFFFFF
