"""Tokenised 8x8 digits (``sklearn.datasets.load_digits``) and deterministic batch sources.

Two tokenizers:

* ``raster``: an image is 64 tokens, its intensities 0..16 quantised to ``levels`` values
  (``levels = 17`` is lossless);
* ``vq``: the paper's kind, a codebook: each ``patch`` x ``patch`` patch of the lossless
  intensities becomes the index of its nearest of ``codebook_size`` k-means centroids
  (fit on the training split), (8 / patch)^2 tokens per image in raster order of patches,
  as LlamaGen's VQ tokenizer turns image patches into codebook indices.

The split is stratified, 1437 train / 360 test, fixed by ``split_seed``; CCA reuses the
training split, as the paper reuses ImageNet's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

NUM_CLASSES = 10     # K; the null label is index K
MAX_INTENSITY = 16   # load_digits intensities are 0..16
IMAGE_SIDE = 8
LENGTH = IMAGE_SIDE * IMAGE_SIDE  # L tokens per image


class Codebook(NamedTuple):
  """A VQ tokenizer: k-means centroids of ``patch`` x ``patch`` intensity patches."""
  centroids: np.ndarray      # [K, patch * patch] float32, intensities in [0, 16]
  patch: int


class Digits(NamedTuple):
  train_tokens: np.ndarray   # [N_train, L] int32 in [0, levels)
  train_labels: np.ndarray   # [N_train] int32 in [0, 10)
  test_tokens: np.ndarray    # [N_test, L] int32
  test_labels: np.ndarray    # [N_test] int32
  levels: int                # vocabulary size V (the codebook's size for ``vq``)
  codebook: Codebook | None = None   # None: raster tokens


TOKENIZERS = ("raster", "vq")


def sequence_length(tokenizer: str = "raster", patch: int = 2) -> int:
  """Tokens per image L: 64 for ``raster``, (8 / patch)^2 for ``vq``."""
  if tokenizer == "raster":
    return LENGTH
  if tokenizer != "vq":
    raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
  if patch < 1 or IMAGE_SIDE % patch:
    raise ValueError(f"patch must divide {IMAGE_SIDE}, got {patch}")
  return (IMAGE_SIDE // patch) ** 2


def quantise(intensities: np.ndarray, levels: int) -> np.ndarray:
  """Intensities in [0, 16] -> tokens in [0, levels) (nearest level)."""
  if not 2 <= int(levels) <= MAX_INTENSITY + 1:
    raise ValueError(f"levels must be in [2, {MAX_INTENSITY + 1}], got {levels}")
  scaled = np.asarray(intensities, np.float64) / MAX_INTENSITY * (levels - 1)
  return np.clip(np.rint(scaled), 0, levels - 1).astype(np.int32)


def to_intensity(tokens: np.ndarray, levels: int) -> np.ndarray:
  """Tokens [..., 64] -> intensities in [0, 16] (float32), the classifiers' input space."""
  return (np.asarray(tokens, np.float32) * (MAX_INTENSITY / (levels - 1))).astype(np.float32)


def _patches(images: np.ndarray, patch: int) -> np.ndarray:
  """Images [N, 64] -> patches [N, (8 / patch)^2, patch^2], patches in raster order."""
  side = IMAGE_SIDE // patch
  x = np.asarray(images, np.float32).reshape(-1, side, patch, side, patch)
  return x.transpose(0, 1, 3, 2, 4).reshape(-1, side * side, patch * patch)


def fit_codebook(images: np.ndarray, size: int, patch: int = 2, seed: int = 0) -> Codebook:
  """k-means (``size`` centroids, k-means++ from ``seed``) over the patches of images [N, 64]."""
  from sklearn.cluster import KMeans  # pylint: disable=g-import-not-at-top
  sequence_length("vq", patch)
  flat = _patches(images, patch).reshape(-1, patch * patch).astype(np.float64)
  distinct = len(np.unique(flat, axis=0))
  if not 2 <= size <= distinct:
    raise ValueError(f"codebook_size must be in [2, {distinct}] (the distinct {patch}x{patch} "
                     f"patches), got {size}")
  km = KMeans(size, n_init=4, random_state=seed).fit(flat)
  return Codebook(km.cluster_centers_.astype(np.float32), int(patch))


def encode(codebook: Codebook, images: np.ndarray) -> np.ndarray:
  """Images [N, 64] (intensities) -> tokens [N, L] int32: each patch's nearest centroid."""
  p = _patches(images, codebook.patch).astype(np.float64)              # [N, L, P^2]
  c = codebook.centroids.astype(np.float64)                             # [K, P^2]
  d = (c * c).sum(-1) - 2.0 * p @ c.T                                   # [N, L, K] + |p|^2
  return np.argmin(d, axis=-1).astype(np.int32)


def decode(codebook: Codebook, tokens: np.ndarray) -> np.ndarray:
  """Tokens [N, L] -> images [N, 64] float32: every patch replaced by its centroid."""
  side, patch = IMAGE_SIDE // codebook.patch, codebook.patch
  x = codebook.centroids[np.asarray(tokens, np.int32)].reshape(-1, side, side, patch, patch)
  return x.transpose(0, 1, 3, 2, 4).reshape(-1, LENGTH).astype(np.float32)


def images(digits: Digits, tokens: np.ndarray) -> np.ndarray:
  """Tokens [N, L] of ``digits``' tokenizer -> intensities [N, 64] in [0, 16] (float32)."""
  if digits.codebook is None:
    return to_intensity(tokens, digits.levels)
  return decode(digits.codebook, tokens)


def load(levels: int = 5, test_size: int = 360, split_seed: int = 0, *,
         tokenizer: str = "raster", codebook_size: int = 512, patch: int = 2,
         codebook_seed: int = 0) -> Digits:
  """The digits, tokenised (``tokenizer``: see the module docstring) and split
  (stratified) into train / test; ``levels`` is used by ``raster`` only."""
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  from sklearn.model_selection import train_test_split  # pylint: disable=g-import-not-at-top
  sequence_length(tokenizer, patch)
  digits = load_digits()
  labels = digits.target.astype(np.int32)
  if tokenizer == "raster":
    tokens = quantise(digits.data, levels)
    tr_x, te_x, tr_y, te_y = train_test_split(tokens, labels, test_size=test_size,
                                              stratify=labels, random_state=split_seed)
    return Digits(tr_x, tr_y, te_x, te_y, int(levels))
  tr_x, te_x, tr_y, te_y = train_test_split(digits.data, labels, test_size=test_size,
                                            stratify=labels, random_state=split_seed)
  codebook = fit_codebook(tr_x, codebook_size, patch, codebook_seed)
  return Digits(encode(codebook, tr_x), tr_y, encode(codebook, te_x), te_y,
                int(codebook_size), codebook)


def epoch_source(tokens: np.ndarray, labels: np.ndarray, batch_size: int,
                 seeds: np.ndarray | list[int]):
  """``data(step) -> {"tokens": [B, R, L], "labels": [B, R]}``: R independent epoch orders.

  Run r shuffles the data once per epoch with ``seeds[r]`` and the epoch number, and drops
  the last partial batch; the run axis is second so the batch axis stays the sharded one.
  """
  tokens = np.asarray(tokens, np.int32)
  labels = np.asarray(labels, np.int32)
  if tokens.ndim != 2 or labels.shape != tokens.shape[:1]:
    raise ValueError(f"tokens must be [N, L] and labels [N]; got {tokens.shape}, "
                     f"{labels.shape}")
  n = tokens.shape[0]
  if not 0 < batch_size <= n:
    raise ValueError(f"batch_size must be in (0, {n}], got {batch_size}")
  per_epoch = n // batch_size
  seeds = [int(s) for s in np.atleast_1d(seeds)]

  def indices(seed: int, step: int) -> np.ndarray:
    epoch, within = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[within * batch_size:(within + 1) * batch_size]

  def data(step: int) -> dict[str, np.ndarray]:
    idx = np.stack([indices(s, step) for s in seeds], axis=1)        # [B, R]
    return {"tokens": tokens[idx], "labels": labels[idx]}

  data.steps_per_epoch = per_epoch
  return data
