"""A generated toy of the confound, with models trained here (also the offline fallback).

Inputs x ~ N(0, I_d). Pretraining labels are generic, sign(a.x); the *task* labels are
sign(t.x) with t = a + shift c (a, c orthonormal), the evaluation is accuracy on task labels.
Each model is a ridge readout (lambda = ``ridge``) of N random ReLU features relu(W x)
(W ~ N(0, 1/d)) trained on D pretraining examples, N = 2^U(log2_width), D =
2^U(log2_examples), the same laws for every model. Every ``new_every``-th model is "newer":
a share ``task_fraction`` of its pretraining labels comes from the task (it trained on the
test task). Fine-tuning gives every model the same ``finetune_examples`` task examples: a
ridge readout centred on its pretrained one (lambda = ``finetune_ridge``); as in the paper
the adjusted score is max(pretrained, fine-tuned).

The fit is A ~ 1 + log10(N D) + new (``kernel.ols``): newer models gain a significant
theta before fine-tuning, and the shared fine-tuning removes it.

Shapes are padded with masks (a masked feature's weight is exactly 0 under the ridge, a
masked example contributes nothing), so the models are vmapped, mapped over in batches
(``batch_size`` models at once); the sizes are drawn stratified in four cells (:func:`cells`),
each padded to its own largest N and D.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.test_task import kernel


class ToySettings(NamedTuple):
  """The generated world (defaults: the brief's construction)."""
  num_models: int = 48
  input_dim: int = 32                          # d
  new_every: int = 3                           # every third model is newer
  task_fraction: float = 0.3                   # share of a newer model's labels from t
  shift: float = 2.0                           # t = a + shift c
  log2_width: tuple[float, float] = (3.0, 9.0)      # N = 2^U(.): random ReLU features
  log2_examples: tuple[float, float] = (7.0, 13.0)  # D = 2^U(.): pretraining examples
  ridge: float = 1e-2                          # pretraining readout's lambda
  finetune_examples: int = 2048                # shared task examples
  finetune_ridge: float = 1.0                  # lambda of the fine-tuning, centred
  test_examples: int = 4096                    # task examples of the evaluation
  batch_size: int = 6                          # models vmapped at once (a cell: 12)
  dtype: str = "float32"                       # of the training ("float64": under x64)


class ToyModels(NamedTuple):
  """What :func:`train_models` returns (arrays [num_models])."""
  width: jax.Array        # N
  examples: jax.Array     # D
  new: jax.Array          # 0/1
  acc_pre: jax.Array      # task accuracy of the pretrained readout
  acc_ft: jax.Array       # after fine-tuning on the shared task data


def check_settings(settings: ToySettings) -> None:
  """ValueError naming the first bad field of ``settings``."""
  s = settings
  rules = (
      ("num_models", s.num_models >= 6), ("input_dim", s.input_dim >= 2),
      ("new_every", 2 <= s.new_every <= s.num_models),
      ("task_fraction", 0 < s.task_fraction <= 1), ("shift", s.shift > 0),
      ("log2_width", 0 <= s.log2_width[0] <= s.log2_width[1] <= 14),
      ("log2_examples", 0 <= s.log2_examples[0] <= s.log2_examples[1] <= 16),
      ("ridge", s.ridge > 0), ("finetune_examples", s.finetune_examples >= 1),
      ("finetune_ridge", s.finetune_ridge > 0), ("test_examples", s.test_examples >= 1),
      ("batch_size", s.batch_size >= 1))
  for name, ok in rules:
    if not ok:
      raise ValueError(f"toy settings: {name} = {getattr(s, name)!r} is not allowed "
                       f"(see ToySettings)")


def _directions(key: jax.Array, dim: int, shift: float, dtype) -> tuple[jax.Array, jax.Array]:
  """(a, t): unit generic direction a and task direction t = a + shift c, c unit, c . a = 0."""
  raw = prng.normal(key, (2, dim), dtype)
  a = raw[0] / jnp.linalg.norm(raw[0])
  c = raw[1] - (raw[1] @ a) * a
  return a, a + shift * c / jnp.linalg.norm(c)


def _ridge(features: jax.Array, targets: jax.Array, ridge: float, centre: jax.Array
           ) -> jax.Array:
  """argmin_w ||features w - targets||^2 + ridge ||w - centre||^2 (Cholesky)."""
  gram = features.T @ features + ridge * jnp.eye(features.shape[1], dtype=features.dtype)
  factor = jax.scipy.linalg.cho_factor(gram)
  return jax.scipy.linalg.cho_solve(factor, features.T @ targets + ridge * centre)


def _one_model(key: jax.Array, sizes: jax.Array, is_new: jax.Array, shared: dict,
               pads: tuple[int, int], settings: ToySettings) -> tuple[jax.Array, jax.Array]:
  """Task accuracy of one model before and after fine-tuning, padded to ``pads`` (N, D)."""
  max_width, max_examples = pads
  dtype = jnp.dtype(settings.dtype)
  k_w, k_x, k_mix = jax.random.split(key, 3)
  weights = prng.normal(k_w, (max_width, settings.input_dim), dtype) / np.sqrt(
      settings.input_dim)
  keep = (jnp.arange(max_width) < sizes[0]).astype(dtype)
  featurize = lambda x: jax.nn.relu(x @ weights.T) * keep  # noqa: E731
  inputs = prng.normal(k_x, (max_examples, settings.input_dim), dtype)
  from_task = prng.uniform(k_mix, (max_examples,), dtype) < settings.task_fraction * is_new
  labels = jnp.sign(jnp.where(from_task, inputs @ shared["t"], inputs @ shared["a"]))
  rows = (jnp.arange(max_examples) < sizes[1]).astype(dtype)[:, None]
  readout = _ridge(featurize(inputs) * rows, labels * rows[:, 0], settings.ridge,
                   jnp.zeros(max_width, dtype))
  tuned = _ridge(featurize(shared["ft_x"]), shared["ft_y"], settings.finetune_ridge, readout)
  test = featurize(shared["test_x"])
  accuracy = lambda w: jnp.mean(jnp.sign(test @ w) == shared["test_y"])  # noqa: E731
  return accuracy(readout), accuracy(tuned)


def cells(settings: ToySettings) -> list[tuple[int, int, int, int]]:
  """The four strata of the sizes, ``(first, stop, width half, examples half)``.

  Each model's log2 N and log2 D are uniform on their ranges (the brief's law), drawn
  stratified: a random permutation assigns a quarter of the models to each pair of halves
  (lower or upper half of each range), uniform within it. A model's law is unchanged (its
  cell is uniform over the four, so its two halves are independent fair coins); the design
  is balanced, and each cell is padded only to its own largest N and D (3-4x less work than
  padding every model to the largest).
  """
  m = settings.num_models
  bounds = [round(i * m / 4) for i in range(5)]
  return [(bounds[c], bounds[c + 1], c // 2, c % 2) for c in range(4)]


def _halves(bounds: tuple[float, float]) -> tuple[tuple[float, float], tuple[float, float]]:
  middle = 0.5 * (bounds[0] + bounds[1])
  return (bounds[0], middle), (middle, bounds[1])


@functools.partial(jax.jit, static_argnames=("settings",))
def train_models(key: jax.Array, settings: ToySettings = ToySettings()) -> ToyModels:
  """Draws the world and the models and trains them all.

  Args:
    key: a typed key (``jax.random.key(seed)``).
    settings: :class:`ToySettings`.

  Returns:
    :class:`ToyModels`.
  """
  dtype = jnp.dtype(settings.dtype)
  k_dir, k_size, k_ft, k_test, k_models, k_perm = jax.random.split(key, 6)
  a, t = _directions(k_dir, settings.input_dim, settings.shift, dtype)
  new = (jnp.arange(settings.num_models) % settings.new_every
         == settings.new_every - 1).astype(dtype)
  ft_x = prng.normal(k_ft, (settings.finetune_examples, settings.input_dim), dtype)
  test_x = prng.normal(k_test, (settings.test_examples, settings.input_dim), dtype)
  shared = {"a": a, "t": t, "ft_x": ft_x, "ft_y": jnp.sign(ft_x @ t), "test_x": test_x,
            "test_y": jnp.sign(test_x @ t)}
  keys = jax.random.split(k_models, settings.num_models)
  unit = prng.uniform(k_size, (settings.num_models, 2), dtype)
  order = jax.random.permutation(k_perm, settings.num_models)
  sizes = jnp.zeros((settings.num_models, 2), dtype)
  pre = ft = jnp.zeros(settings.num_models, jnp.float32)
  for first, stop, w_half, d_half in cells(settings):
    ranges = (_halves(settings.log2_width)[w_half], _halves(settings.log2_examples)[d_half])
    members = order[first:stop]
    low, high = jnp.array(ranges, dtype).T
    cell_sizes = jnp.round(2.0 ** (low + (high - low) * unit[members]))    # [m, 2]: N, D
    pads = tuple(int(round(2 ** r[1])) for r in ranges)
    out = jax.lax.map(lambda args, pads=pads: _one_model(*args, shared, pads, settings),
                      (keys[members], cell_sizes, new[members]),
                      batch_size=settings.batch_size)
    sizes = sizes.at[members].set(cell_sizes)
    pre, ft = pre.at[members].set(out[0]), ft.at[members].set(out[1])
  return ToyModels(width=sizes[:, 0], examples=sizes[:, 1], new=new, acc_pre=pre, acc_ft=ft)


@dataclasses.dataclass(frozen=True)
class ToyFit:
  """theta of A ~ 1 + log10(N D) + new on the toy's models, before and after."""
  seed: int
  theta_pre: float
  se_pre: float
  p_pre: float
  theta_post: float       # post = max(pre, fine-tuned)
  se_post: float
  p_post: float
  mean_acc_pre: float
  mean_acc_post: float


@jax.jit
def _toy_ols(log_compute: jax.Array, new: jax.Array, scores: jax.Array) -> kernel.OLSFit:
  design = jnp.stack([jnp.ones_like(log_compute), log_compute, new], axis=1)
  return jax.vmap(lambda y: kernel.ols(design, y))(scores)


def fit_toy(models: ToyModels, seed: int) -> ToyFit:
  """The confound regression of the toy (float64), pre and post = max(pre, fine-tuned)."""
  pre = np.asarray(models.acc_pre, np.float64)
  post = np.maximum(pre, np.asarray(models.acc_ft, np.float64))
  with enable_x64():
    log_compute = jnp.log10(jnp.asarray(models.width, jnp.float64)
                            * jnp.asarray(models.examples, jnp.float64))
    fit = jax.device_get(_toy_ols(log_compute, jnp.asarray(models.new, jnp.float64),
                                  jnp.stack([jnp.asarray(pre), jnp.asarray(post)])))
  return ToyFit(seed=seed, theta_pre=float(fit.coef[0, 2]), se_pre=float(fit.se[0, 2]),
                p_pre=float(fit.p[0, 2]), theta_post=float(fit.coef[1, 2]),
                se_post=float(fit.se[1, 2]), p_post=float(fit.p[1, 2]),
                mean_acc_pre=float(pre.mean()), mean_acc_post=float(post.mean()))


def run_toy(seeds: list[int], settings: ToySettings = ToySettings()
            ) -> tuple[list[ToyFit], list[ToyModels]]:
  """Trains and fits the toy for each seed (one compiled program for all seeds)."""
  check_settings(settings)
  fits, worlds = [], []
  for seed in seeds:
    models = jax.device_get(train_models(jax.random.key(seed), settings))
    worlds.append(models)
    fits.append(fit_toy(models, seed))
  return fits, worlds
