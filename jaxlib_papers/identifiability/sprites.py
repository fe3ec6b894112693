"""The DisLib experiment on sprites rendered in code: CE on the shape, decode the rest.

The paper (Table 4) trains an encoder with cross-entropy on the categorical factor of
dSprites / Shapes3D / ... and decodes every factor linearly from the representation: the
factor is standardised on the training split, fitted by least squares without intercept,
and scored by Pearson r on the validation split. Baselines: raw pixels and (ours) the
untrained encoder. Our stand-in renders squares, ellipses and triangles at several scales
and positions (``data.render_sprites``); seeds are vmapped in one program.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import contract, prng
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


def make_kernel(images: np.ndarray, labels: np.ndarray, train_index: np.ndarray, *,
                num_classes: int, hidden: tuple[int, ...], batch_size: int,
                learning_rate: float, steps_per_call: int) -> contract.TrainKernel:
  """CE on ``labels`` with an MLP encoder and a linear readout, one run per seed.

  Args:
    images: [n, p] flattened images (all splits).
    labels: [n] int class labels.
    train_index: [S, n_train] each seed's training indices.
    num_classes: readout width.

  Returns:
    A TrainKernel (vmapped over seeds) with the extra ``representation(params,
    batch_stats, x) -> [n, hidden[-1]]`` (eval mode, one seed).
  """
  images = jnp.asarray(images, jnp.float32)
  labels = jnp.asarray(labels, jnp.int32)
  train_index = jnp.asarray(train_index, jnp.int32)
  num_seeds, n_train = train_index.shape
  encoder = Encoder(tuple(hidden), 0, True, 0.0)   # ReLU, representation = last hidden
  tx = optax.adam(learning_rate)

  def init_one(key):
    k_enc, k_out, k_data = jax.random.split(key, 3)
    variables = encoder.init(k_enc, images[:2], train=False)
    bound = 1.0 / np.sqrt(hidden[-1])
    params = {"encoder": variables["params"],
              "readout": {"w": prng.uniform(k_out, (hidden[-1], num_classes),
                                                  minval=-bound, maxval=bound),
                          "b": jnp.zeros((num_classes,))}}
    return SpritesState(params, variables["batch_stats"], tx.init(params), k_data,
                        jnp.zeros((), jnp.int32))

  def init(key):
    return jax.vmap(init_one)(jax.random.split(key, num_seeds))

  def loss_fn(params, batch_stats, x, y):
    h, updates = encoder.apply({"params": params["encoder"], "batch_stats": batch_stats},
                               x, train=True, mutable=["batch_stats"])
    logits = h @ params["readout"]["w"] + params["readout"]["b"]
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))
    return loss, (updates["batch_stats"], jnp.mean(jnp.argmax(logits, -1) == y))

  def step_one(state: SpritesState, index):
    def body(s, _):
      key, k = jax.random.split(s.key)
      rows = index[prng.randint(k, (batch_size,), 0, n_train)]
      (loss, (bs, acc)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          s.params, s.batch_stats, images[rows], labels[rows])
      updates, opt = tx.update(grads, s.opt_state, s.params)
      return SpritesState(optax.apply_updates(s.params, updates), bs, opt, key,
                          s.step + 1), (loss, acc)
    state, (loss, acc) = jax.lax.scan(body, state, None, length=steps_per_call)
    return state, (jnp.mean(loss), acc[-1])

  def train_step(state: SpritesState, batch=None):
    del batch
    state, (loss, acc) = jax.vmap(step_one)(state, train_index)
    return state, {"loss": jnp.mean(loss), "train_accuracy": jnp.mean(acc)}

  def representation(params, batch_stats, x):
    return encoder.apply({"params": params["encoder"], "batch_stats": batch_stats}, x,
                         train=False)

  return contract.train_kernel(init, train_step, representation=representation)


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
