"""The data-generating process of the paper, as pure functions of a typed key.

Latents live on the sphere ``S^{d-1}``. Cluster vectors ``v_c`` are uniform on the sphere;
every sample draws an instance index ``I ~ Uni{0..N-1}``, its class is ``c = I mod |C|``
and its latent is ``z | c ~ vMF(v_c, kappa)`` (density ``∝ exp(kappa <v_c, z>)``). The
observation is ``x = g(z)`` with ``g`` a frozen, well-conditioned invertible leaky-ReLU
MLP without biases (``x = A_L s(... s(A_1 z))``, ``s = LeakyReLU(0.2)``).

Two misspecified conditionals of the paper's Tables 2-3 are here too: ``normalize(v_c +
e)`` with ``e`` Laplace or Normal of scale ``kappa / 10`` per coordinate.

Everything has static shapes (jit- and vmap-friendly): Wood's rejection sampler draws a
fixed number of proposals per sample and keeps the first accepted one (the rare sample
with none accepted keeps its last proposal and is counted).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import scipy.special

from jaxlib_papers.core import prng

CONDITIONALS = ("vmf", "laplace", "normal")


class Problem(NamedTuple):
  """One frozen data-generating process (a leading run axis is added under vmap)."""
  centers: jax.Array   # [C, d] float32, cluster vectors v_c (unit norm)
  mixing: jax.Array    # [L, d, d] float32, the matrices A_1..A_L of g


class Batch(NamedTuple):
  """Samples of the data-generating process."""
  x: jax.Array         # [n, d] float32, observations g(z)
  z: jax.Array         # [n, d] float32, latents on the sphere
  index: jax.Array     # [n] int32, instance index I in [0, N)
  label: jax.Array     # [n] int32, class c = I mod |C|
  rejected: jax.Array  # [] int32, vMF samples with no accepted proposal (0 otherwise)


def normalize(x: jax.Array, axis: int = -1, eps: float = 1e-12) -> jax.Array:
  """``x / ||x||`` along ``axis`` (zero rows stay finite)."""
  return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), eps)


def uniform_sphere(key: jax.Array, num: int, dim: int) -> jax.Array:
  """``[num, dim]`` points uniform on ``S^{dim-1}`` (normalised Gaussians)."""
  return normalize(prng.normal(key, (num, dim)))


def cluster_vectors(key: jax.Array, num_classes: int, dim: int) -> jax.Array:
  """The cluster vectors ``v_c``: ``[num_classes, dim]``, uniform on the sphere."""
  if num_classes < 1 or dim < 2:
    raise ValueError(f"num_classes must be >= 1 and dim >= 2; got {num_classes}, {dim}")
  return uniform_sphere(key, num_classes, dim)


def mean_resultant_length(dim: int, kappa: float) -> float:
  """``E<mu, z>`` under ``vMF(mu, kappa)`` on ``S^{dim-1}``: ``A_d(kappa) = I_{d/2} /
  I_{d/2-1}`` (exponentially scaled Bessel functions, so large kappa does not overflow)."""
  return float(scipy.special.ive(dim / 2, kappa) / scipy.special.ive(dim / 2 - 1, kappa))


def sample_vmf(key: jax.Array, mean: jax.Array, kappa: jax.Array, *,
               num_proposals: int = 12) -> tuple[jax.Array, jax.Array]:
  """Wood's (1994) vMF sampler with a static number of proposals per sample.

  Args:
    key: typed PRNG key.
    mean: [n, d] unit mean directions.
    kappa: [] concentration (> 0).
    num_proposals: Beta proposals per sample; the first accepted one is kept.

  Returns:
    ``(z [n, d], rejected [])``: samples on the sphere and how many samples had no
    accepted proposal (those keep their last proposal; Wood's acceptance rate is above
    ~0.5 for every d and kappa, so with 12 proposals this is rarer than 1 in 4096).
  """
  chex.assert_rank(mean, 2)
  n, d = mean.shape
  kappa = jnp.asarray(kappa, jnp.float32)
  dm1 = jnp.float32(d - 1)
  b = dm1 / (jnp.sqrt(4.0 * kappa**2 + dm1**2) + 2.0 * kappa)
  x0 = (1.0 - b) / (1.0 + b)
  c0 = kappa * x0 + dm1 * jnp.log(1.0 - x0**2)
  k_beta, k_unif, k_tan = jax.random.split(key, 3)
  # Beta((d-1)/2, (d-1)/2) as (1 + t_1) / 2 with t uniform on S^{d-1}: d normals per
  # proposal instead of two gamma rejection loops (much faster on CPU, exact in law).
  sphere = uniform_sphere(k_beta, n * num_proposals, d)
  u = (0.5 * (1.0 + sphere[:, 0])).reshape(n, num_proposals)
  w = (1.0 - (1.0 + b) * u) / (1.0 - (1.0 - b) * u)
  log_uniform = jnp.log(prng.uniform(k_unif, (n, num_proposals), minval=1e-12))
  accept = kappa * w + dm1 * jnp.log1p(-x0 * w) - c0 >= log_uniform
  any_accept = jnp.any(accept, axis=1)
  first = jnp.where(any_accept, jnp.argmax(accept, axis=1), num_proposals - 1)
  w = jnp.take_along_axis(w, first[:, None], axis=1)                        # [n, 1]
  tangent = prng.normal(k_tan, (n, d))
  tangent = normalize(tangent - jnp.sum(tangent * mean, -1, keepdims=True) * mean)
  z = w * mean + jnp.sqrt(jnp.clip(1.0 - w**2, 0.0)) * tangent
  return z, jnp.sum(~any_accept).astype(jnp.int32)


def sample_conditional(key: jax.Array, mean: jax.Array, kappa: jax.Array,
                       kind: str = "vmf", *, num_proposals: int = 12
                       ) -> tuple[jax.Array, jax.Array]:
  """``z | c`` for the means ``mean: [n, d]``: ``vmf``, or the misspecified ``laplace`` /
  ``normal`` (``normalize(v_c + scale * noise)`` with ``scale = kappa / 10``).

  Returns:
    ``(z [n, d], rejected [] int32)``.
  """
  if kind == "vmf":
    return sample_vmf(key, mean, kappa, num_proposals=num_proposals)
  if kind == "laplace":
    noise = prng.laplace(key, mean.shape)
  elif kind == "normal":
    noise = prng.normal(key, mean.shape)
  else:
    raise ValueError(f"conditional must be one of {CONDITIONALS}; got {kind!r}")
  return normalize(mean + kappa / 10.0 * noise), jnp.int32(0)


def leaky_relu(x: jax.Array, slope: float = 0.2) -> jax.Array:
  return jnp.where(x >= 0, x, slope * x)


def make_mixing(key: jax.Array, dim: int, num_layers: int = 4,
                num_candidates: int = 2048) -> jax.Array:
  """The mixing matrices ``A_1..A_L``: ``[num_layers, dim, dim]``.

  Each is the best-conditioned of ``num_candidates`` draws with entries ``U(-1, 1)`` and
  l2-normalised columns (the official code rejects draws above the minimum condition
  number of 25,000 draws; the best of a few thousand is the same idea with static shapes).
  """
  if dim < 2 or num_layers < 1 or num_candidates < 1:
    raise ValueError("dim must be >= 2, num_layers and num_candidates >= 1; got "
                     f"{dim}, {num_layers}, {num_candidates}")

  def one_layer(k):
    cand = prng.uniform(k, (num_candidates, dim, dim), minval=-1.0, maxval=1.0)
    cand = cand / jnp.linalg.norm(cand, axis=1, keepdims=True)   # columns
    sv = jnp.linalg.svd(cand, compute_uv=False)                  # [M, d], descending
    return cand[jnp.argmin(sv[:, 0] / sv[:, -1])]

  return jax.vmap(one_layer)(jax.random.split(key, num_layers))


def mix(mixing: jax.Array, z: jax.Array, slope: float = 0.2) -> jax.Array:
  """``x = g(z) = A_L s(... s(A_1 z))``: ``z: [n, d] -> [n, d]`` (no bias, no final s)."""
  x = z @ mixing[0].T
  for layer in range(1, mixing.shape[0]):
    x = leaky_relu(x, slope) @ mixing[layer].T
  return x


def unmix(mixing: jax.Array, x: jax.Array, slope: float = 0.2) -> jax.Array:
  """``g^{-1}``: ``x: [n, d] -> z`` (exists: every A is invertible, s is bijective)."""
  for layer in range(mixing.shape[0] - 1, 0, -1):
    x = jnp.linalg.solve(mixing[layer], x.T).T
    x = jnp.where(x >= 0, x, x / slope)
  return jnp.linalg.solve(mixing[0], x.T).T


def make_problem(key: jax.Array, dim: int, num_classes: int, *, mixing_layers: int = 4,
                 mixing_candidates: int = 2048) -> Problem:
  """Cluster vectors and the mixing g of one run, from ``key``."""
  k_c, k_g = jax.random.split(key)
  return Problem(cluster_vectors(k_c, num_classes, dim),
                 make_mixing(k_g, dim, mixing_layers, mixing_candidates))


def sample_batch(key: jax.Array, problem: Problem, kappa: jax.Array, batch_size: int,
                 num_indices: int, conditional: str = "vmf", *,
                 num_proposals: int = 12) -> Batch:
  """Fresh samples: indices ``I ~ Uni{0..N-1}``, ``c = I mod |C|``, ``z | c``, ``x = g(z)``.

  Args:
    key: typed PRNG key.
    problem: the run's cluster vectors ``[C, d]`` and mixing ``[L, d, d]``.
    kappa: [] concentration.
    batch_size: n.
    num_indices: N, the number of instance indices (DIET labels).
    conditional: ``vmf`` | ``laplace`` | ``normal``.

  Returns:
    A :class:`Batch`.
  """
  num_classes = problem.centers.shape[0]
  k_i, k_z = jax.random.split(key)
  index = prng.randint(k_i, (batch_size,), 0, num_indices, dtype=jnp.int32)
  label = index % num_classes
  z, rejected = sample_conditional(k_z, problem.centers[label], kappa, conditional,
                                   num_proposals=num_proposals)
  return Batch(mix(problem.mixing, z), z, index, label, rejected)


# ---------------------------------------------------------------------------------------
# A user's data set: the trainer infers every shape from it (``train.run(config, dataset=)``).


class Dataset(NamedTuple):
  """Labelled samples of the user's own (``x``, ``y``[, ``z``]).

  ``z`` is optional: with it, the result reports the paper's linear-identifiability R^2 of
  ``z`` from the learned features; without it, only the classifier's scores.
  """
  x: np.ndarray                 # [N, p] float32, observations
  y: np.ndarray                 # [N] int32, labels in [0, K)
  z: np.ndarray | None = None   # [N, d] float32, latents (if known)


def _finite_matrix(name: str, a, source: str) -> np.ndarray:
  a = np.asarray(a)
  if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
    raise ValueError(f"{source}: {name} must be a 2-D array [N, features]; got shape "
                     f"{a.shape}")
  if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
    raise ValueError(f"{source}: {name} must be real numbers; got dtype {a.dtype}")
  bad = np.argwhere(~np.isfinite(a))
  if bad.size:
    row, col = (int(i) for i in bad[0])
    raise ValueError(f"{source}: {name}[{row}, {col}] is {a[row, col]} ({len(bad)} "
                     "non-finite entries); drop or impute those samples")
  return a.astype(np.float32)


def as_dataset(x, y, z=None, *, source: str = "dataset") -> Dataset:
  """A checked :class:`Dataset`; a ValueError naming ``source``, the array and the fix."""
  x = _finite_matrix("x", x, source)
  y = np.asarray(y)
  if y.ndim != 1 or y.shape[0] != x.shape[0]:
    raise ValueError(f"{source}: y must be a 1-D array with one label per row of x "
                     f"({x.shape[0]}); got shape {y.shape}")
  if not np.issubdtype(y.dtype, np.number) or np.any(np.asarray(y, float) % 1 != 0):
    raise ValueError(f"{source}: y must hold integer class labels; got dtype {y.dtype}")
  if y.min() < 0:
    raise ValueError(f"{source}: y must be >= 0 (labels 0..K-1); y[{int(np.argmin(y))}] = "
                     f"{int(y.min())}")
  if z is not None:
    z = _finite_matrix("z", z, source)
    if z.shape[0] != x.shape[0]:
      raise ValueError(f"{source}: z must have one row per row of x ({x.shape[0]}); got "
                       f"{z.shape[0]}")
  return Dataset(x, y.astype(np.int32), z)


def load_dataset(path) -> Dataset:
  """A :class:`Dataset` from an ``.npz`` file with arrays ``x``, ``y`` and optionally ``z``."""
  try:
    with np.load(path, allow_pickle=False) as f:
      arrays = {k: f[k] for k in f.files}
  except (OSError, ValueError) as e:
    raise ValueError(f"{path}: not a readable .npz file with arrays x, y[, z] ({e})") from e
  missing = [k for k in ("x", "y") if k not in arrays]
  if missing:
    raise ValueError(f"{path}: missing array(s) {missing}; the file must hold x [N, p] and "
                     f"y [N] (and optionally z [N, d]); it has {sorted(arrays)}")
  return as_dataset(arrays["x"], arrays["y"], arrays.get("z"), source=str(path))


def dataset_batches(x: np.ndarray, labels: np.ndarray, batch_size: int, steps: int,
                    seed: int):
  """``data(call) -> {"x": [B, k, p], "y": [B, k]}``: ``k = steps`` minibatches drawn with
  replacement, deterministic in ``call`` (a resumed run sees the same batches). The batch
  axis leads, so the loop shards it over devices; the kernel scans the step axis."""

  def data(call: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, call])
    idx = rng.integers(0, x.shape[0], (batch_size, steps))
    return {"x": x[idx], "y": labels[idx]}

  return data


# ---------------------------------------------------------------------------------------
# Sprites: a stand-in for dSprites rendered in code (no download).

SPRITE_SHAPES = ("square", "ellipse", "triangle")


class Sprites(NamedTuple):
  images: np.ndarray   # [n, size, size] float32 in [0, 1]
  shape: np.ndarray    # [n] int32, 0 square / 1 ellipse / 2 triangle (the CE label)
  scale: np.ndarray    # [n] float32, half-size of the sprite (fraction of the canvas)
  pos_x: np.ndarray    # [n] float32, centre x in [0, 1]
  pos_y: np.ndarray    # [n] float32, centre y in [0, 1]


def render_sprites(size: int = 32, num_scales: int = 6, num_positions: int = 16,
                   supersample: int = 4) -> Sprites:
  """Every (shape, scale, x, y) combination, anti-aliased by supersampling.

  The sprite's half-size runs over ``linspace(0.08, 0.18, num_scales)`` of the canvas and
  its centre over ``linspace(0.2, 0.8, num_positions)`` in x and y, so all sprites fit.
  ``3 * 6 * 16 * 16 = 4,608`` images at the defaults.

  Returns:
    A :class:`Sprites` in (shape, scale, x, y) order.
  """
  if size < 8 or num_scales < 1 or num_positions < 2 or supersample < 1:
    raise ValueError("size must be >= 8, num_scales >= 1, num_positions >= 2 and "
                     f"supersample >= 1; got {size}, {num_scales}, {num_positions}, "
                     f"{supersample}")
  fine = size * supersample
  grid = (np.arange(fine, dtype=np.float32) + 0.5) / fine
  scales = np.linspace(0.08, 0.18, num_scales, dtype=np.float32)
  positions = np.linspace(0.2, 0.8, num_positions, dtype=np.float32)
  cx, cy = np.meshgrid(positions, positions, indexing="ij")                  # [P, P]
  cx, cy = cx.reshape(-1, 1, 1), cy.reshape(-1, 1, 1)
  px, py = grid[None, None, :], grid[None, :, None]                          # x cols, y rows
  images, shape_id, scale_v, pos_x, pos_y = [], [], [], [], []
  for s_id, name in enumerate(SPRITE_SHAPES):
    for r in scales:
      dx, dy = px - cx, py - cy
      if name == "square":
        mask = (np.abs(dx) <= r) & (np.abs(dy) <= r)
      elif name == "ellipse":
        mask = (dx / r) ** 2 + (dy / (0.6 * r)) ** 2 <= 1.0
      else:  # triangle with its apex up (y grows downwards in images)
        mask = (np.abs(dy) <= r) & (np.abs(dx) <= 0.5 * (dy + r))
      img = mask.astype(np.float32).reshape(-1, size, supersample, size, supersample)
      images.append(img.mean(axis=(2, 4)))
      count = cx.shape[0]
      shape_id.append(np.full(count, s_id, np.int32))
      scale_v.append(np.full(count, r, np.float32))
      pos_x.append(cx.reshape(-1))
      pos_y.append(cy.reshape(-1))
  return Sprites(np.concatenate(images), np.concatenate(shape_id), np.concatenate(scale_v),
                 np.concatenate(pos_x), np.concatenate(pos_y))
