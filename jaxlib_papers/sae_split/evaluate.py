"""Readouts, baseline splits and the downstream affinity models (host side, float64).

* :func:`max_similarity_to_train`: r_i = max over training j of Tanimoto(x_i, x_j) for the
  test rows, exact, by row blocks (never N x N).
* Baselines: :func:`random_split`, :func:`scaffold_split` (Bemis-Murcko groups, largest to
  train), :func:`butina_split` (RDKit's Butina clusters at a Tanimoto distance cutoff,
  largest to train).
* Models: :func:`ridge_predict` (ridge on centred fingerprints) and :func:`knn_predict`
  (k most similar training molecules, Tanimoto-weighted mean); :func:`r2_per_bin`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.sae_split import kernel


def num_test(num: int, test_size: float) -> int:
  """n_test = N - int((1 - a) N) (the official count, not round(a N))."""
  return num - int((1.0 - test_size) * num)


@jax.jit
def _block_max(rows: jax.Array, fps: jax.Array, train: jax.Array) -> jax.Array:
  return jnp.max(jnp.where(train[None, :], kernel.tanimoto(rows, fps), 0.0), axis=1)


def _blocks(x: np.ndarray, block: int):
  pad = (-len(x)) % block
  x = np.pad(x, ((0, pad), (0, 0)))
  return [jnp.asarray(x[i:i + block]) for i in range(0, len(x), block)]


def max_similarity_to_train(fingerprints: np.ndarray, test: np.ndarray,
                            block: int = 512) -> np.ndarray:
  """r [n_test] for the rows of the [N] bool mask ``test``, in row order, exact (every
  split of one set shares one compiled program: the training set enters as a mask)."""
  fingerprints = np.asarray(fingerprints, np.float32)
  test = np.asarray(test, bool)
  block = min(block, len(fingerprints))
  fps, train = jnp.asarray(fingerprints), jnp.asarray(~test)
  out = [np.asarray(_block_max(rows, fps, train))
         for rows in _blocks(fingerprints[test], block)]
  return np.concatenate(out)[:int(test.sum())].astype(np.float64)


def counts(readout: np.ndarray, edges) -> np.ndarray:
  """[K] int test counts per bin (half-open, the top bin closed at 1)."""
  edges = np.asarray(edges, np.float64)
  bins = np.clip(np.searchsorted(edges, readout, side="right") - 1, 0, len(edges) - 2)
  return np.bincount(bins, minlength=len(edges) - 1)


def l1_to_target(test_counts: np.ndarray, weights) -> float:
  """mean_k |n_k / n_test - E_k| (the official score with its sign flipped)."""
  test_counts = np.asarray(test_counts, np.float64)
  return float(np.mean(np.abs(test_counts / test_counts.sum() - np.asarray(weights))))


# ------------------------------------------------------------------------------ baselines


def random_split(num: int, test_size: float, seed: int) -> np.ndarray:
  """[N] bool test mask: n_test samples drawn uniformly."""
  rng = np.random.default_rng(seed)
  test = np.zeros(num, bool)
  test[rng.permutation(num)[:num_test(num, test_size)]] = True
  return test


def group_split(groups, test_size: float) -> np.ndarray:
  """[N] bool test mask: whole groups, largest first, go to train until it holds
  int((1 - a) N); the rest (small groups) is test (ties by first appearance)."""
  groups = list(groups)
  num = len(groups)
  order, sizes = {}, {}
  for g in groups:
    order.setdefault(g, len(order))
    sizes[g] = sizes.get(g, 0) + 1
  ranked = sorted(sizes, key=lambda g: (-sizes[g], order[g]))
  train_groups, filled = set(), 0
  for g in ranked:
    if filled + sizes[g] > num - num_test(num, test_size):
      break
    train_groups.add(g)
    filled += sizes[g]
  return np.array([g not in train_groups for g in groups])


def scaffold_split(smiles, test_size: float) -> np.ndarray:
  """Bemis-Murcko scaffold groups, largest to train."""
  from jaxlib_papers.sae_split import data  # pylint: disable=g-import-not-at-top
  return group_split(data.scaffolds(smiles), test_size)


def butina_clusters(fingerprints: np.ndarray, cutoff: float) -> np.ndarray:
  """[N] int cluster ids of RDKit's Butina clustering at Tanimoto distance ``cutoff``."""
  from rdkit import DataStructs  # pylint: disable=g-import-not-at-top
  from rdkit.ML.Cluster import Butina  # pylint: disable=g-import-not-at-top
  vectors = []
  for row in np.asarray(fingerprints):
    bv = DataStructs.ExplicitBitVect(len(row))
    bv.SetBitsFromList(np.flatnonzero(row).tolist())
    vectors.append(bv)
  distances = []
  for i in range(1, len(vectors)):
    distances.extend(1.0 - np.asarray(DataStructs.BulkTanimotoSimilarity(vectors[i],
                                                                         vectors[:i])))
  clusters = Butina.ClusterData(distances, len(vectors), cutoff, isDistData=True)
  labels = np.empty(len(vectors), np.int64)
  for c, members in enumerate(clusters):
    labels[list(members)] = c
  return labels


# ------------------------------------------------------------------------------ models


def ridge_predict(x_train, y_train, x_test, ridge: float = 1.0) -> np.ndarray:
  """Ridge (penalty ``ridge``) on fingerprints centred by the training mean, intercept the
  training mean of y. x: [n, B]; returns [n_test]."""
  x_train, x_test = np.asarray(x_train, np.float64), np.asarray(x_test, np.float64)
  mean_x, mean_y = x_train.mean(0), float(np.mean(y_train))
  xc = x_train - mean_x
  if xc.shape[0] < xc.shape[1]:   # dual form: n x n
    alpha = np.linalg.solve(xc @ xc.T + ridge * np.eye(len(xc)), y_train - mean_y)
    coef = xc.T @ alpha
  else:
    coef = np.linalg.solve(xc.T @ xc + ridge * np.eye(xc.shape[1]),
                           xc.T @ (y_train - mean_y))
  return (x_test - mean_x) @ coef + mean_y


@functools.partial(jax.jit, static_argnums=(4,))
def _knn_block(rows, fps, labels, train, k):
  sim = jnp.where(train[None, :], kernel.tanimoto(rows, fps), -1.0)
  sim, index = jax.lax.top_k(sim, k)
  weight = jnp.maximum(sim, 0.0) + 1e-8
  return jnp.sum(weight * labels[index], 1) / jnp.sum(weight, 1)


def knn_predict(fingerprints, labels, test, k: int = 5, block: int = 512) -> np.ndarray:
  """Tanimoto-weighted mean of the k most similar training labels for the test rows.

  Args:
    fingerprints: [N, B] 0/1; labels: [N]; test: [N] bool (the rest is train).

  Returns:
    [n_test] predictions, row order.
  """
  fingerprints = np.asarray(fingerprints, np.float32)
  test = np.asarray(test, bool)
  block = min(block, len(fingerprints))
  fps, train = jnp.asarray(fingerprints), jnp.asarray(~test)
  y = jnp.asarray(np.asarray(labels, np.float32))
  out = [np.asarray(_knn_block(rows, fps, y, train, int(k)))
         for rows in _blocks(fingerprints[test], block)]
  return np.concatenate(out)[:int(test.sum())].astype(np.float64)


def r2(y: np.ndarray, prediction: np.ndarray) -> float:
  """1 - SSE / SS about the mean of y (NaN for fewer than 2 samples)."""
  y, prediction = np.asarray(y, np.float64), np.asarray(prediction, np.float64)
  if len(y) < 2:
    return float("nan")
  return float(1.0 - np.sum((y - prediction) ** 2) / np.sum((y - y.mean()) ** 2))


def r2_per_bin(y, prediction, readout, edges) -> list[float]:
  """R^2 within each similarity bin (against that bin's mean)."""
  edges = np.asarray(edges, np.float64)
  bins = np.clip(np.searchsorted(edges, readout, side="right") - 1, 0, len(edges) - 2)
  return [r2(np.asarray(y)[bins == k], np.asarray(prediction)[bins == k])
          for k in range(len(edges) - 1)]
