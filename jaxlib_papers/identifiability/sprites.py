"""The DisLib experiment on sprites rendered in code: CE on the shape, decode the rest.

The paper (Table 4) trains an encoder with cross-entropy on the categorical factor of
dSprites / Shapes3D / ... and decodes every factor linearly from the representation: the
factor is standardised on the training split, fitted by least squares without intercept,
and scored by Pearson r on the validation split. Baselines: raw pixels and (ours) the
untrained encoder. Our stand-in renders squares, ellipses and triangles at several scales
and positions (``data.render_sprites``); seeds are vmapped in one program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import blocks, contract, prng
from jaxlib_papers.identifiability import data as data_lib
from jaxlib_papers.identifiability.models import Encoder

FACTORS = ("shape", "scale", "pos_x", "pos_y")


class Split(NamedTuple):
  """One seed's split of the sprites (indices into the rendered set)."""
  train: np.ndarray   # [n_train] int
  val: np.ndarray     # [n_val] int


def split_indices(num: int, seed: int, val_fraction: float = 0.1,
                  test_fraction: float = 0.1) -> Split:
  """A random train / validation split (a test part is held back, as in the paper)."""
  if not 0 < val_fraction < 1 or not 0 <= test_fraction < 1 - val_fraction:
    raise ValueError(f"val_fraction must be in (0, 1) and test_fraction in [0, 1 - val); "
                     f"got {val_fraction}, {test_fraction}")
  order = np.random.default_rng(seed).permutation(num)
  n_val, n_test = int(num * val_fraction), int(num * test_fraction)
  return Split(order[n_val + n_test:], order[:n_val])


class SpritesState(NamedTuple):
  params: Any          # encoder and readout params, leading seed axis [S, ...]
  batch_stats: Any     # BatchNorm running averages [S, ...]
  opt_state: Any       # Adam moments [S, ...]
  key: jax.Array       # [S] typed keys of the minibatch stream
  step: jax.Array      # [S] int32


def factor_matrix(sprites: data_lib.Sprites) -> np.ndarray:
  """``[n, 4]`` float32 factors in :data:`FACTORS` order."""
  return np.stack([sprites.shape, sprites.scale, sprites.pos_x, sprites.pos_y],
                  1).astype(np.float32)


class SpritesSettings(NamedTuple):
  """Static settings of the sprites kernel."""
  num_classes: int              # readout width (sprite shapes)
  hidden: tuple[int, ...]       # encoder widths; the representation is the last
  batch_size: int
  learning_rate: float
  steps_per_call: int


class SpritesData(NamedTuple):
  """The rendered set, closed over by the kernel (all splits)."""
  images: jax.Array     # [n, p] float32 flattened images
  labels: jax.Array     # [n] int32 class labels


def encoder(settings: SpritesSettings) -> Encoder:
  """The MLP encoder (ReLU; the representation is the last hidden layer)."""
  return Encoder(tuple(settings.hidden), 0, True, 0.0)


def init_one(settings: SpritesSettings, data: SpritesData, key: jax.Array) -> SpritesState:
  """One seed's state (no seed axis)."""
  hidden, num_classes = settings.hidden, settings.num_classes
  k_enc, k_out, k_data = jax.random.split(key, 3)
  variables = encoder(settings).init(k_enc, data.images[:2], train=False)
  bound = 1.0 / np.sqrt(hidden[-1])
  params = {"encoder": variables["params"],
            "readout": {"w": prng.uniform(k_out, (hidden[-1], num_classes),
                                          minval=-bound, maxval=bound),
                        "b": jnp.zeros((num_classes,))}}
  return SpritesState(params, variables["batch_stats"],
                      optax.adam(settings.learning_rate).init(params), k_data,
                      jnp.zeros((), jnp.int32))


def cross_entropy(params: Any, batch_stats: Any, x: jax.Array, y: jax.Array, *,
                  settings: SpritesSettings) -> tuple[jax.Array, tuple[Any, jax.Array]]:
  """CE of the readout on ``y``: ``(loss [], (new batch_stats, accuracy []))``; x: [n, p]."""
  h, updates = encoder(settings).apply(
      {"params": params["encoder"], "batch_stats": batch_stats}, x, train=True,
      mutable=["batch_stats"])
  logits = h @ params["readout"]["w"] + params["readout"]["b"]
  loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))
  return loss, (updates["batch_stats"], jnp.mean(jnp.argmax(logits, -1) == y))


def train_step_one(settings: SpritesSettings, update: Callable[..., blocks.Update],
                   data: SpritesData, state: SpritesState, index: jax.Array
                   ) -> tuple[SpritesState, dict[str, jax.Array]]:
  """One Adam step of one seed on a minibatch drawn from its training ``index`` [n_train]."""
  key, k = jax.random.split(state.key)
  rows = index[prng.randint(k, (settings.batch_size,), 0, index.shape[0])]
  out = update(state.params, state.opt_state, state.batch_stats, data.images[rows],
               data.labels[rows])
  batch_stats, acc = out.aux
  return (SpritesState(out.params, batch_stats, out.opt_state, key, state.step + 1),
          {"loss": out.loss, "train_accuracy": acc})


def call_metrics(stacked: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """A call's mean loss and last-step training accuracy from the ``[k]`` step metrics."""
  return {"loss": jnp.mean(stacked["loss"]), "train_accuracy": stacked["train_accuracy"][-1]}


def make_kernel(images: np.ndarray, labels: np.ndarray, train_index: np.ndarray,
                settings: SpritesSettings) -> contract.TrainKernel:
  """CE on ``labels`` with an MLP encoder and a linear readout, one run per seed.

  Args:
    images: [n, p] flattened images (all splits).
    labels: [n] int class labels.
    train_index: [S, n_train] each seed's training indices.
    settings: the static settings.

  Returns:
    A TrainKernel (vmapped over seeds) with the extra ``representation(params,
    batch_stats, x) -> [n, hidden[-1]]`` (eval mode, one seed).
  """
  data = SpritesData(jnp.asarray(images, jnp.float32), jnp.asarray(labels, jnp.int32))
  train_index = jnp.asarray(train_index, jnp.int32)
  update = blocks.gradient_step(functools.partial(cross_entropy, settings=settings),
                                optax.adam(settings.learning_rate), has_aux=True)
  step = blocks.scan_steps(functools.partial(train_step_one, settings, update, data),
                           settings.steps_per_call, metrics=call_metrics)
  members = blocks.vmap_members(step, batch_axis=0)

  def train_step(state: SpritesState, batch: Any = None):
    del batch   # every seed samples its own minibatches from its training indices
    return members(state, train_index)

  init = blocks.vmap_init(functools.partial(init_one, settings, data), train_index.shape[0])
  return contract.train_kernel(init, train_step,
                               representation=functools.partial(representation, settings))


def representation(settings: SpritesSettings, params: Any, batch_stats: Any, x: jax.Array
                   ) -> jax.Array:
  """The last hidden layer of one seed in eval mode: x [n, p] -> [n, hidden[-1]]."""
  return encoder(settings).apply({"params": params["encoder"], "batch_stats": batch_stats},
                                 x, train=False)


def pearson(y: jax.Array, pred: jax.Array) -> jax.Array:
  """Pearson r per column: y, pred [n, q] -> [q]."""
  y, pred = y - jnp.mean(y, 0), pred - jnp.mean(pred, 0)
  return jnp.sum(y * pred, 0) / jnp.sqrt(jnp.sum(y**2, 0) * jnp.sum(pred**2, 0) + 1e-30)


def decode_r(h_train: jax.Array, y_train: jax.Array, h_val: jax.Array, y_val: jax.Array
             ) -> jax.Array:
  """The paper's decoding: standardise factors on train, least squares without
  intercept (pseudo-inverse), Pearson r on validation. Returns ``[q]``."""
  y_std = (y_train - jnp.mean(y_train, 0)) / jnp.maximum(jnp.std(y_train, 0), 1e-12)
  beta = jnp.linalg.pinv(h_train) @ y_std
  return pearson(y_val, h_val @ beta)
