"""Opinion depolarisation: the mean-field polarising reference drift (D = 100).

The population's opinions x in R^D move under a reference drift that polarises
them (the "polarize" dynamics of DeepGSB, Liu et al. 2022, used by GSBM and
FSBM). With xi_t a unit "news" direction at time t and p_t the population law,

    f(t, x; p_t) = strength * m(t) * sign(<x, xi_t>) * B_t,
    B_t = b_t / sqrt(|b_t|),   b_t = E_{y ~ p_t}[ sign(<y, xi_t>) y / sqrt(|y|) ],

i.e. everybody moves along the population's signed mean opinion, towards the
side of xi_t it already agrees with, so the population splits into two
opposite camps. m(t) = clip(1 - exp(c (t - 1)) + 1e-5, 1e-4, 1)^5 switches the
drift off near t = 1 (c = 8). sign(0) counts as -1 ("agree" means > 0).

The population enters only through the table B [S_f, D] on the grid
linspace(0, 1, S_f) (nearest grid point, as the official code indexes it):
the FSBM kernel stores it in its state and refreshes it from the fitted
Gaussian paths after each R-step (see :class:`PolarizeDrift`).

Depolarisation is measured by the directional similarity of pairs of
(centred) opinions, d_ij = 1 - angle(x_i, x_j) / pi: near 1/2 for a
non-polarised cloud in high dimension, near 0 or 1 for two opposite camps.
Its mean stays near 1/2 in both cases, so we report the polarisation index
mean_ij |2 d_ij - 1| (0 = no polarisation, 1 = two antipodal camps).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng
from jaxlib_papers.fsbm import tasks

# Official setting (DeepGSB / FSBM opinion task).
STRENGTH = 6.0
MULTIPLIER_COEFF = 8.0
NUM_FIELD_TIMES = 500
DIRECTION_SEED = 4078213


def news_directions(num_times: int, dim: int, *, seed: int = DIRECTION_SEED,
                    std: float = 0.4) -> np.ndarray:
  """[num_times, dim] unit vectors xi_t that drift slowly over time.

  An Euler-discretised Ornstein-Uhlenbeck walk xi <- xi - 2 xi dt + std sqrt(dt) z,
  dt = 1 / num_times, started at a standard normal draw; each row is then
  normalised to unit length.
  """
  if num_times < 1 or dim < 1:
    raise ValueError(f"num_times and dim must be >= 1, got {num_times}, {dim}")
  z = np.random.default_rng(seed).standard_normal((num_times, dim))
  dt = 1.0 / num_times
  xis = np.empty_like(z)
  xi = z[0]
  xis[0] = xi
  for i in range(1, num_times):
    xi = xi - 2.0 * xi * dt + std * np.sqrt(dt) * z[i]
    xis[i] = xi
  return (xis / np.linalg.norm(xis, axis=-1, keepdims=True)).astype(np.float32)


def time_multiplier(num_times: int, coeff: float = MULTIPLIER_COEFF) -> np.ndarray:
  """[num_times] m(t) on linspace(0, 1, num_times): ~1 early, 0 at t = 1."""
  t = np.linspace(0.0, 1.0, num_times)
  return (np.clip(1.0 - np.exp(coeff * (t - 1.0)) + 1e-5, 1e-4, 1.0) ** 5).astype(np.float32)


def _agree(inner: jax.Array) -> jax.Array:
  return jnp.where(inner > 0, 1.0, -1.0).astype(inner.dtype)


def _root_normalise(v: jax.Array, tiny: float = 1e-12) -> jax.Array:
  """v / sqrt(|v|) over the last axis (0 stays 0)."""
  norm = jnp.linalg.norm(v, axis=-1, keepdims=True)
  return v / jnp.sqrt(jnp.maximum(norm, tiny))


def mean_field_term(y: jax.Array, xi: jax.Array) -> jax.Array:
  """B = b / sqrt(|b|), b = mean_j sign(<y_j, xi>) y_j / sqrt(|y_j|).

  Args:
    y: [P, D] population samples at one time.
    xi: [D] news direction at that time.

  Returns:
    [D].
  """
  agree = _agree(y @ xi)[:, None]
  return _root_normalise(jnp.mean(agree * _root_normalise(y), axis=0))


class PolarizeDrift(NamedTuple):
  """The polarising reference drift, a mean-field drift for the FSBM kernel.

  Use ``drift(t, x, field)`` with ``field`` the [S_f, D] table B; the kernel
  calls ``field_from(sample_at)`` with ``sample_at(s) -> [P, D]`` population
  samples at time s to (re)build the table.

  Attributes:
    directions: [S_f, D] xi on linspace(0, 1, S_f).
    multiplier: [S_f] m(t) on the same grid.
    strength: scalar drift strength.
  """

  directions: jax.Array
  multiplier: jax.Array
  strength: float = STRENGTH

  @classmethod
  def create(cls, dim: int, *, num_times: int = NUM_FIELD_TIMES,
             strength: float = STRENGTH, coeff: float = MULTIPLIER_COEFF,
             seed: int = DIRECTION_SEED) -> PolarizeDrift:
    return cls(directions=jnp.asarray(news_directions(num_times, dim, seed=seed)),
               multiplier=jnp.asarray(time_multiplier(num_times, coeff)),
               strength=float(strength))

  @property
  def field_shape(self) -> tuple[int, int]:
    return tuple(self.directions.shape)

  def grid(self, dtype=jnp.float32) -> jax.Array:
    return jnp.linspace(0.0, 1.0, self.directions.shape[0], dtype=dtype)

  def time_index(self, t: jax.Array) -> jax.Array:
    num = self.directions.shape[0]
    return jnp.clip(jnp.round(jnp.asarray(t) * (num - 1)), 0, num - 1).astype(jnp.int32)

  def drift(self, t: jax.Array, x: jax.Array, field: jax.Array) -> jax.Array:
    """f(t, x) for x [..., D] and t broadcastable to x[..., 0]; field [S_f, D].

    The tables are gathered at t's own shape and then broadcast, so a time
    grid shared by many paths (CondSOC: t [1, S], x [N, S, D], vmapped over
    pairs) costs one [S, D] gather, not one per path.
    """
    idx = self.time_index(t)
    return self.drift_at(idx, x, field[idx])

  def drift_at(self, idx: jax.Array, x: jax.Array, term: jax.Array) -> jax.Array:
    """f for x [..., D] at grid index idx (broadcastable to x[..., 0]) given the
    mean-field term B [*idx.shape, D] there."""
    xi = self.directions[idx].astype(x.dtype)                  # [*idx.shape, D]
    agree = _agree(jnp.sum(x * xi, axis=-1, keepdims=True))
    scale = self.strength * self.multiplier[idx].astype(x.dtype)[..., None]
    return jnp.broadcast_to(agree * (scale * term.astype(x.dtype)), x.shape)

  def field_from(self, sample_at) -> jax.Array:
    """[S_f, D] table B from ``sample_at(s, i) -> [P, D]`` (s the i-th grid time)."""
    grid = self.grid()

    def one(i):
      return mean_field_term(sample_at(grid[i], i), self.directions[i])

    return jax.lax.map(one, jnp.arange(grid.shape[0]), batch_size=25)


def simulate_reference(drift: PolarizeDrift, x0: jax.Array, key: jax.Array, *,
                       sigma: float, num_steps: int) -> jax.Array:
  """Euler-Maruyama of the uncontrolled polarising dynamics from x0 [P, D].

  The mean-field table is recomputed from the particles at every step (the
  population law p_t is the particles' empirical law).

  Returns:
    [num_steps + 1, P, D] path, index 0 at t = 0.
  """
  dt = 1.0 / num_steps

  def step(x, inputs):
    i, k = inputs
    t = i * dt
    idx = drift.time_index(t)
    f = drift.drift_at(idx, x, mean_field_term(x, drift.directions[idx]))
    x = x + f * dt + sigma * jnp.sqrt(dt) * prng.normal(k, x.shape, x.dtype)
    return x, x

  keys = jax.random.split(key, num_steps)
  _, xs = jax.lax.scan(step, x0, (jnp.arange(num_steps, dtype=x0.dtype), keys))
  return jnp.concatenate([x0[None], xs], axis=0)


def polarisation_index(x, num_pairs: int | None = None, seed: int = 0) -> float:
  """mean |2 d_ij - 1| over pairs i != j of centred opinions x [n, D].

  d_ij = 1 - angle(x_i, x_j) / pi is the directional similarity. All pairs
  when ``num_pairs`` is None, else that many random pairs (i != j).
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2 or x.shape[0] < 2:
    raise ValueError(f"x must be [n >= 2, D], got {x.shape}")
  x = x - x.mean(axis=0, keepdims=True)
  u = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  if num_pairs is None:
    cos = (u @ u.T)[~np.eye(len(u), dtype=bool)]
  else:
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(u), num_pairs)
    j = (i + rng.integers(1, len(u), num_pairs)) % len(u)
    cos = np.sum(u[i] * u[j], axis=1)
  d = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi
  return float(np.mean(np.abs(2.0 * d - 1.0)))


def generate_keypoints(num: int, num_steps: int, dim: int, *, seed: int = 0,
                       eps: float = 1e-3, jitter: float = 0.5) -> np.ndarray:
  """Aligned, non-polarised opinion trajectories [num, num_steps, dim].

  No official opinion keypoints exist in the shared data, so we generate
  them: endpoints from the two marginals paired by exact OT (POT) and joined
  by the straight line plus a Brownian-bridge jitter (std ``jitter`` at
  mid-time scale), on the CondSOC grid linspace(eps, 1 - eps, num_steps).
  These are what a depolarised population would look like: they interpolate
  p0 and p1 without forming camps.
  """
  from jaxlib_papers.core import ot as core_ot  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  p0, p1 = tasks.marginals("opinion", dim)
  x0, x1 = p0.sample(rng, num), p1.sample(rng, num)
  x1 = x1[np.argmax(core_ot.exact_coupling(x0, x1), axis=1)]
  t = np.linspace(eps, 1.0 - eps, num_steps)[None, :, None]
  lin = (1.0 - t) * x0[:, None] + t * x1[:, None]
  walk = np.cumsum(rng.standard_normal(lin.shape) * np.sqrt(1.0 / num_steps), axis=1)
  bridge = walk - t * walk[:, -1:]
  return (lin + jitter * bridge).astype(np.float32)
