"""Data: Gaussian mixtures (closed-form oracle) and CIFAR-10 through tensorflow-datasets.

Every training source is a callable ``data(step) -> numpy batch`` that depends only on
(seed, step), so a resumed run sees the same batches as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jaxlib_papers.ocm import gmm

VECTOR_DATASETS = ("ring2d", "gmm16")
IMAGE_DATASETS = ("cifar10",)


def make_mixture(config) -> gmm.GaussianMixture:
  """The mixture named by ``config.data`` ("ring2d" or "gmm16")."""
  name = config.data.name
  if name == "ring2d":
    return gmm.ring(config.data.num_modes, config.data.radius, config.data.std)
  if name == "gmm16":
    return gmm.random_mixture(config.data.mixture_seed, config.data.num_modes, config.data.dim,
                              spread=config.data.radius)
  raise ValueError(f"config.data.name must be one of {VECTOR_DATASETS}, got {name!r}")


def sample_mixture_numpy(mix: gmm.GaussianMixture, rng: np.random.Generator, num: int
                         ) -> np.ndarray:
  """[num, D] float32 samples drawn on the host (no device work in the input pipeline)."""
  weights = np.asarray(mix.weights, np.float64)
  comp = rng.choice(len(weights), size=num, p=weights / weights.sum())
  noise = rng.standard_normal((num, mix.dim))
  return (np.asarray(mix.means)[comp] + np.asarray(mix.stds)[comp] * noise).astype(np.float32)


def mixture_source(mix: gmm.GaussianMixture, batch_size: int, seed: int
                   ) -> Callable[[int], np.ndarray]:
  """data(step) -> [batch_size, D], fresh samples of the mixture, deterministic in step."""
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")

  def data(step: int) -> np.ndarray:
    return sample_mixture_numpy(mix, np.random.default_rng((seed, int(step))), batch_size)

  return data


def load_cifar10(split: str = "train", limit: int | None = None) -> np.ndarray:
  """CIFAR-10 images as float32 [M, 32, 32, 3] in [-1, 1], via ``tfds.data_source``.

  ``data_source`` gives random access without TensorFlow; under
  ``tfds.testing.mock_data`` it returns mock images (the tests' path). The whole split is
  read once into host memory (150 MB for the train split).
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  source = tfds.data_source("cifar10", split=split)
  num = len(source) if limit is None else min(int(limit), len(source))
  if num < 1:
    raise ValueError(f"cifar10 split {split!r} is empty")
  images = np.stack([np.asarray(source[i]["image"]) for i in range(num)])
  return images.astype(np.float32) / 127.5 - 1.0


def image_source(images: np.ndarray, batch_size: int, seed: int, *, flip: bool = True
                 ) -> Callable[[int], np.ndarray]:
  """data(step) -> [batch_size, H, W, C]: uniform draws (with random horizontal flips)."""
  if images.ndim != 4:
    raise ValueError(f"images must be [M, H, W, C], got {images.shape}")

  def data(step: int) -> np.ndarray:
    rng = np.random.default_rng((seed, int(step)))
    batch = images[rng.integers(0, images.shape[0], size=batch_size)]
    if flip:
      mask = rng.random(batch_size) < 0.5
      batch = np.where(mask[:, None, None, None], batch[:, :, ::-1], batch)
    return batch

  return data
