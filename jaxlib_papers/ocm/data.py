"""Data: Gaussian mixtures (closed-form oracle) and CIFAR-10 through tensorflow-datasets.

Every training source is a callable ``data(step) -> numpy batch`` that depends only on
(seed, step), so a resumed run sees the same batches as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jaxlib_papers.ocm import gmm

VECTOR_DATASETS = ("ring2d", "gmm16", "gmm")
IMAGE_DATASETS = ("cifar10", "digits")


def make_mixture(config) -> gmm.GaussianMixture:
  """The mixture named by ``config.data``.

  "ring2d": ``num_modes`` modes on a circle of ``radius``, std ``std``; "gmm" (and its
  historical name "gmm16"): ``random_mixture(mixture_seed, num_modes, dim)`` with means in
  [-radius, radius] and per-dimension stds uniform in ``std_range`` (anisotropic).
  """
  name = config.data.name
  if name == "ring2d":
    return gmm.ring(config.data.num_modes, config.data.radius, config.data.std)
  if name in ("gmm16", "gmm"):
    return gmm.random_mixture(config.data.mixture_seed, config.data.num_modes, config.data.dim,
                              spread=config.data.radius,
                              std_range=tuple(config.data.get("std_range", (0.05, 0.2))))
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


def load_digits(split: str = "train", num_eval: int = 297) -> np.ndarray:
  """scikit-learn's 8x8 handwritten digits as float32 [M, 8, 8, 1] on the 8-bit grid of [-1, 1].

  The 17 grey levels (0..16) are mapped to the nearest of 256 levels, so the discretised
  decoder's bound is a bound on -log P of an 8-bit image, as for CIFAR-10. The last
  ``num_eval`` images (a fixed split, no download: the set ships with scikit-learn) are the
  "test" split, the rest "train".
  """
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  images = datasets.load_digits().images                      # [1797, 8, 8] in 0..16
  levels = np.round(images / 16.0 * 255.0)
  x = (levels / 127.5 - 1.0).astype(np.float32)[..., None]
  if split == "train":
    return x[:-num_eval]
  if split == "test":
    return x[-num_eval:]
  raise ValueError(f"digits split must be 'train' or 'test', got {split!r}")


def check_samples(x, source: str = "dataset") -> np.ndarray:
  """A user's samples as float32 ``[N, D]`` vectors or ``[N, H, W, C]`` images in [-1, 1];
  a ValueError naming ``source``, what is wrong and where."""
  x = np.asarray(x)
  if x.ndim not in (2, 4) or x.shape[0] < 4:
    raise ValueError(f"{source}: expected [N, D] vectors or [N, H, W, C] images with N >= 4; "
                     f"got shape {x.shape}")
  if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
    raise ValueError(f"{source}: expected real numbers; got dtype {x.dtype}")
  bad = np.argwhere(~np.isfinite(x))
  if bad.size:
    raise ValueError(f"{source}: the sample at index {tuple(int(i) for i in bad[0])} is "
                     f"{x[tuple(bad[0])]} ({len(bad)} non-finite values); drop or impute them")
  if x.ndim == 4 and (x.min() < -1 or x.max() > 1):
    raise ValueError(f"{source}: images must be scaled to [-1, 1] (x / 127.5 - 1 for 8-bit "
                     f"pixels); got values in [{x.min():g}, {x.max():g}]")
  return x.astype(np.float32)


def load_samples(path) -> np.ndarray:
  """:func:`check_samples` of the array in a ``.npy`` file (no pickles)."""
  try:
    x = np.load(path, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise ValueError(f"{path}: not a readable .npy array ({e})") from e
  return check_samples(x, str(path))


def array_source(x: np.ndarray, batch_size: int, seed: int) -> Callable[[int], np.ndarray]:
  """data(step) -> [batch_size, ...]: uniform draws from ``x``, deterministic in step."""

  def data(step: int) -> np.ndarray:
    return x[np.random.default_rng((seed, int(step))).integers(0, x.shape[0], batch_size)]

  return data


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
