"""Tokenised 8x8 digits (``sklearn.datasets.load_digits``) and deterministic batch sources.

An image is 64 raster tokens: intensities 0..16 quantised to ``levels`` values
(``levels = 17`` is lossless). The split is stratified, 1437 train / 360 test, fixed by
``split_seed``; CCA reuses the training split, as the paper reuses ImageNet's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

NUM_CLASSES = 10     # K; the null label is index K
MAX_INTENSITY = 16   # load_digits intensities are 0..16
IMAGE_SIDE = 8
LENGTH = IMAGE_SIDE * IMAGE_SIDE  # L tokens per image


class Digits(NamedTuple):
  train_tokens: np.ndarray   # [N_train, 64] int32 in [0, levels)
  train_labels: np.ndarray   # [N_train] int32 in [0, 10)
  test_tokens: np.ndarray    # [N_test, 64] int32
  test_labels: np.ndarray    # [N_test] int32
  levels: int                # vocabulary size V


def quantise(intensities: np.ndarray, levels: int) -> np.ndarray:
  """Intensities in [0, 16] -> tokens in [0, levels) (nearest level)."""
  if not 2 <= int(levels) <= MAX_INTENSITY + 1:
    raise ValueError(f"levels must be in [2, {MAX_INTENSITY + 1}], got {levels}")
  scaled = np.asarray(intensities, np.float64) / MAX_INTENSITY * (levels - 1)
  return np.clip(np.rint(scaled), 0, levels - 1).astype(np.int32)


def to_intensity(tokens: np.ndarray, levels: int) -> np.ndarray:
  """Tokens [..., 64] -> intensities in [0, 16] (float32), the classifiers' input space."""
  return (np.asarray(tokens, np.float32) * (MAX_INTENSITY / (levels - 1))).astype(np.float32)


def load(levels: int = 5, test_size: int = 360, split_seed: int = 0) -> Digits:
  """The digits, tokenised and split (stratified) into train / test."""
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  from sklearn.model_selection import train_test_split  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  tokens = quantise(digits.data, levels)
  labels = digits.target.astype(np.int32)
  tr_x, te_x, tr_y, te_y = train_test_split(tokens, labels, test_size=test_size,
                                            stratify=labels, random_state=split_seed)
  return Digits(tr_x, tr_y, te_x, te_y, int(levels))


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
