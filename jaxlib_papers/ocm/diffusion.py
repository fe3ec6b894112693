"""Discrete-time DDPM machinery: schedules, skip-step reverse steps, samplers, K-step NELBO.

Notation (the brief's): ``x_t = sqrt(abar_t) x0 + sigma_t eps`` with ``sigma_t^2 = 1 - abar_t``,
``t in {1, ..., N}`` and ``abar_0 = 1``. Every covariance method of the paper is expressed by
the *x0-covariance* ``c`` it plugs into the reverse step (diagonal, or a scalar broadcast):

* skip step ``s < t``: ``beta_{t|s} = 1 - abar_t / abar_s``,
  ``lam~^2 = beta_{t|s} sigma_s^2 / sigma_t^2``, ``lam^2 = eta^2 lam~^2``;
* mean ``sqrt(abar_s) x0_hat + sqrt(sigma_s^2 - lam^2) eps_hat``;
* variance ``lam^2 + (sqrt(abar_s) - sqrt((sigma_s^2 - lam^2) abar_t / sigma_t^2))^2 c``.

``eta = 1`` is the DDPM sampler (its mean equals the brief's DDPM form, algebra checked in
the tests), ``eta = 0`` DDIM; with a nonzero ``c`` both are stochastic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import distributed, prng

Array = jax.Array
# predict(x_t [B, ...], t: int scalar array) -> (eps_hat [B, ...], x0_cov broadcastable to x_t)
Predictor = Callable[[Array, Array], tuple[Array, Array]]


class Schedule(NamedTuple):
  """A discrete DDPM noise schedule (host numpy, float64; indexed by integer t).

  Attributes:
    betas: [N + 1] with betas[0] = 0 (t = 0 is the data).
    abar: [N + 1] cumulative products, abar[0] = 1.
  """
  betas: np.ndarray
  abar: np.ndarray

  @property
  def num_steps(self) -> int:
    return int(self.abar.shape[0] - 1)


def make_schedule(kind: str = "linear", num_steps: int = 1000, *, beta_start: float = 1e-4,
                  beta_end: float = 0.02, cosine_s: float = 0.008) -> Schedule:
  """DDPM's linear schedule (Ho et al.) or the cosine schedule (Nichol & Dhariwal).

  Args:
    kind: "linear" or "cosine".
    num_steps: N, the number of diffusion steps (1000 in the paper).
    beta_start, beta_end: the linear schedule's end points.
    cosine_s: the cosine schedule's offset.

  Returns:
    A :class:`Schedule` with arrays of length N + 1.
  """
  if num_steps < 2:
    raise ValueError(f"num_steps must be >= 2, got {num_steps}")
  if kind == "linear":
    betas = np.linspace(beta_start, beta_end, num_steps, dtype=np.float64)
  elif kind == "cosine":
    grid = np.arange(num_steps + 1, dtype=np.float64) / num_steps
    f = np.cos((grid + cosine_s) / (1 + cosine_s) * np.pi / 2) ** 2
    abar = f / f[0]
    # Clipping at 0.999 avoids a singular last step (as in improved DDPM).
    betas = np.minimum(1.0 - abar[1:] / abar[:-1], 0.999)
  else:
    raise ValueError(f"schedule kind must be 'linear' or 'cosine', got {kind!r}")
  betas = np.concatenate([[0.0], betas])
  return Schedule(betas=betas, abar=np.cumprod(1.0 - betas))


def skip_timesteps(num_sample_steps: int, num_steps: int) -> np.ndarray:
  """The K timesteps ``round(1 + k (N - 1) / (K - 1))``, k = 0..K-1 (so 1 and N are included).

  Returns:
    int32 [K], increasing, first 1 and last N.
  """
  if not 2 <= num_sample_steps <= num_steps:
    raise ValueError(
        f"num_sample_steps must be in [2, {num_steps}], got {num_sample_steps}")
  k = np.arange(num_sample_steps, dtype=np.float64)
  return np.round(1 + k * (num_steps - 1) / (num_sample_steps - 1)).astype(np.int32)


def _gather(table: np.ndarray, t: Array) -> Array:
  return jnp.asarray(table)[t]


def marginal(schedule: Schedule, t: Array) -> tuple[Array, Array]:
  """(sqrt(abar_t), sigma_t) at integer t (any shape)."""
  abar = _gather(schedule.abar, t)
  return jnp.sqrt(abar), jnp.sqrt(1.0 - abar)


def q_sample(schedule: Schedule, x0: Array, t: Array, noise: Array) -> Array:
  """x_t = sqrt(abar_t) x0 + sigma_t noise; t: [B] int, x0 / noise: [B, ...]."""
  alpha, sigma = marginal(schedule, t)
  shape = (-1,) + (1,) * (x0.ndim - 1)
  return alpha.reshape(shape) * x0 + sigma.reshape(shape) * noise


class StepCoefficients(NamedTuple):
  """Coefficients of one reverse step t -> s (scalars).

  lam2: the variance of q(x_s | x_t, x0); eps_coef: sqrt(sigma_s^2 - lam2), multiplying
  eps_hat in the mean; cov_coef: multiplies (x0 - x0_hat) in mean_q - mean_p, so the x0
  covariance c enters the reverse variance as lam2 + cov_coef^2 c.
  """
  lam2: Array
  eps_coef: Array
  cov_coef: Array
  sqrt_abar_s: Array


def step_coefficients(schedule: Schedule, t: Array, s: Array, eta: float | Array
                      ) -> StepCoefficients:
  abar = jnp.asarray(schedule.abar)
  abar_t, abar_s = abar[t], abar[s]
  sig2_t, sig2_s = 1.0 - abar_t, 1.0 - abar_s
  beta_ts = 1.0 - abar_t / abar_s
  lam2 = jnp.square(eta) * beta_ts * sig2_s / sig2_t
  eps_coef = jnp.sqrt(jnp.maximum(sig2_s - lam2, 0.0))
  cov_coef = jnp.sqrt(abar_s) - eps_coef * jnp.sqrt(abar_t / sig2_t)
  return StepCoefficients(lam2, eps_coef, cov_coef, jnp.sqrt(abar_s))


def predict_x0(schedule: Schedule, x_t: Array, t: Array, eps: Array,
               clip_x0: float | None = None) -> tuple[Array, Array]:
  """x0_hat from eps_hat; with ``clip_x0`` the x0 estimate is clipped and eps made consistent.

  Returns:
    (x0_hat, eps_hat), both like x_t.
  """
  alpha, sigma = marginal(schedule, t)
  x0 = (x_t - sigma * eps) / alpha
  if clip_x0 is not None:
    x0 = jnp.clip(x0, -clip_x0, clip_x0)
    eps = (x_t - alpha * x0) / sigma
  return x0, eps


def reverse_moments(schedule: Schedule, x_t: Array, t: Array, s: Array, eps: Array,
                    x0_cov: Array, eta: float | Array = 1.0, clip_x0: float | None = None
                    ) -> tuple[Array, Array]:
  """Mean and diagonal variance of p(x_s | x_t) for the skip step t -> s.

  Args:
    x_t: [B, ...]; t, s: integer scalars with s < t; eps: eps_hat like x_t;
    x0_cov: the method's x0-covariance, broadcastable to x_t.
    eta: 1 = DDPM, 0 = DDIM.

  Returns:
    (mean like x_t, variance broadcast to x_t).
  """
  coef = step_coefficients(schedule, t, s, eta)
  x0_hat, eps = predict_x0(schedule, x_t, t, eps, clip_x0)
  mean = coef.sqrt_abar_s * x0_hat + coef.eps_coef * eps
  var = coef.lam2 + jnp.square(coef.cov_coef) * x0_cov
  return mean, jnp.broadcast_to(var, mean.shape)


def sample(predict: Predictor, schedule: Schedule, timesteps: np.ndarray, x_T: Array,
           key: Array, *, eta: float = 1.0, clip_x0: float | None = None) -> Array:
  """Ancestral sampling over the skip timesteps (DDPM for eta = 1, DDIM for eta = 0).

  The reverse chain is one ``lax.scan``; the last step (t = timesteps[0] -> 0) returns the
  mean x0_hat, as in the paper.

  Args:
    predict: the method, ``predict(x_t, t) -> (eps_hat, x0_cov)``.
    timesteps: int [K] increasing (see :func:`skip_timesteps`).
    x_T: [B, ...] the starting noise (standard normal).
    key: a typed PRNG key.

  Returns:
    x0 samples [B, ...].

  Traced under a mesh of several devices (``core.distributed.traced_on``), the samples are
  split over them (``distributed.split``): each device runs the chain on its share, the
  same values (on one device, or under ``jax.jit`` alone, nothing changes).
  """
  timesteps = np.asarray(timesteps)
  if timesteps.ndim != 1 or timesteps.shape[0] < 2 or np.any(np.diff(timesteps) <= 0):
    raise ValueError(f"timesteps must be an increasing 1-D array of >= 2 ints, got {timesteps}")
  ts = jnp.asarray(timesteps[::-1][:-1])
  ss = jnp.asarray(timesteps[::-1][1:])
  keys = jax.random.split(key, ts.shape[0])

  def body(x, inputs):
    t, s, k = inputs
    eps, x0_cov = predict(x, t)
    mean, var = reverse_moments(schedule, x, t, s, eps, x0_cov, eta, clip_x0)
    x = mean + jnp.sqrt(var) * prng.normal(k, x.shape, x.dtype)
    return distributed.split(x), None

  x, _ = jax.lax.scan(body, distributed.split(x_T), (ts, ss, keys))
  t0 = jnp.asarray(timesteps[0])
  eps, _ = predict(x, t0)
  x0_hat, _ = predict_x0(schedule, x, t0, eps, clip_x0)
  return x0_hat


def _gauss_kl(mean_q, var_q, mean_p, var_p):
  return 0.5 * (jnp.log(var_p / var_q) + (var_q + jnp.square(mean_q - mean_p)) / var_p - 1.0)


class BoundSettings(NamedTuple):
  """How the K-step bound is computed (the sampler's eta, the clip, the decoder density).

  Attributes:
    eta: must be > 0 (q(x_s | x_t, x0) is a point mass at eta = 0).
    clip_x0: > 0 clips x0_hat to [-clip_x0, clip_x0]; None does not.
    discrete_decoder: the decoder is the discretised Gaussian of 8-bit images in [-1, 1]
      (bins of width 2/255, the outer bins open), as in DDPM and the official likelihood;
      otherwise a continuous Gaussian density.
  """
  eta: float = 1.0
  clip_x0: float | None = None
  discrete_decoder: bool = False


def nelbo(predict: Predictor, schedule: Schedule, timesteps: np.ndarray, x0: Array,
          key: Array, *, decoder_var: float | Array | None = None,
          settings: BoundSettings = BoundSettings()) -> tuple[Array, Array]:
  """The K-step negative ELBO of the skip-step model, per data point, in nats.

  -log p(x0) <= KL(q(x_N | x0) || N(0, I))
    + sum_{i >= 1} E_q KL(q(x_{tau_{i-1}} | x_{tau_i}, x0) || p(x_{tau_{i-1}} | x_{tau_i}))
    - E_q log p(x0 | x_{tau_0}),
  with each x_t drawn from q(x_t | x0) (one draw per term, so the estimate is unbiased).

  Args:
    predict: the method (see :func:`sample`).
    timesteps: int [K] increasing, first 1 and last N.
    x0: [B, ...] data.
    key: a typed PRNG key.
    decoder_var: overrides the variance of p(x0 | x_1). The official protocol fixes it to
      tilde_beta(1, 2) for every method (:func:`official_decoder_var`); without an override
      the method's own x0-covariance at t_0 is used (DDPM's fixed beta~ has c = 0 there).
      A NaN (possibly traced) means no override.
    settings: eta, the x0 clip and the decoder density (:class:`BoundSettings`).

  Returns:
    (nelbo [B], terms [K + 1, B]: prior, K - 1 transitions (largest t first), decoder).
  """
  return nelbo_many(predict, schedule, [timesteps], x0, key, decoder_vars=[decoder_var],
                    settings=settings)[0]


def _check_sequences(lists: Sequence[np.ndarray], decoder_vars: Sequence[Any] | None,
                     eta: float, num_steps: int) -> Sequence[Any]:
  """``decoder_vars`` (one None per sequence by default) after checking every argument."""
  if not lists:
    raise ValueError("timesteps must hold at least one sequence")
  if decoder_vars is None:
    decoder_vars = [None] * len(lists)
  if len(decoder_vars) != len(lists):
    raise ValueError(f"decoder_vars must have one entry per sequence ({len(lists)}), got "
                     f"{len(decoder_vars)}")
  if not eta > 0:
    raise ValueError(f"the NELBO needs eta > 0, got {eta}")
  for ts in lists:
    if ts.ndim != 1 or len(ts) < 2 or ts[-1] != num_steps:
      raise ValueError(f"timesteps must be [K >= 2] ending at N = {num_steps}, got {ts}")
  return decoder_vars


def _transition_terms(predict: Predictor, schedule: Schedule, lists: Sequence[np.ndarray],
                      x0: Array, key: Array, settings: BoundSettings) -> Array:
  """[sum_i (K_i - 1), B] KL terms of every sequence's transitions (largest t first)."""
  axes = tuple(range(1, x0.ndim))
  ts = jnp.asarray(np.concatenate([t[::-1][:-1] for t in lists]))
  ss = jnp.asarray(np.concatenate([t[::-1][1:] for t in lists]))
  keys = jnp.concatenate([jax.random.split(key, len(t) - 1) for t in lists])

  def transition(inputs):
    t, s, k = inputs
    noise = prng.normal(k, x0.shape, x0.dtype)
    tb = jnp.full((x0.shape[0],), t)
    x_t = q_sample(schedule, x0, tb, noise)
    eps_hat, x0_cov = predict(x_t, t)
    coef = step_coefficients(schedule, t, s, settings.eta)
    x0_hat, _ = predict_x0(schedule, x_t, t, eps_hat, settings.clip_x0)
    var_p = coef.lam2 + jnp.square(coef.cov_coef) * x0_cov
    var_p = jnp.broadcast_to(var_p, x0.shape)
    diff = coef.cov_coef * (x0 - x0_hat)
    return jnp.sum(_gauss_kl(diff, coef.lam2, 0.0, var_p), axis=axes)

  return jax.lax.map(transition, (ts, ss, keys))


def _decoder_term(x0: Array, x0_hat: Array, x0_cov: Array, decoder_var: Any,
                  discrete_decoder: bool) -> Array:
  """[B] -log p(x0 | x_{t_0}) with the decoder's variance (see :func:`nelbo`)."""
  axes = tuple(range(1, x0.ndim))
  if decoder_var is None:
    var = x0_cov
  else:  # NaN means "no override", so one compiled program serves every method.
    decoder_var = jnp.asarray(decoder_var, x0.dtype)
    var = jnp.where(jnp.isnan(decoder_var), x0_cov, decoder_var)
  # A method whose x0-covariance hits its clip at 0 would give log(0); the floor keeps the
  # bound finite (and huge), so such a failure shows as a number rather than a NaN.
  var = jnp.maximum(jnp.broadcast_to(var, x0.shape), 1e-12)
  if discrete_decoder:
    return -jnp.sum(discretized_gaussian_log_prob(x0, x0_hat, var), axis=axes)
  return jnp.sum(0.5 * (jnp.log(2 * jnp.pi * var) + jnp.square(x0 - x0_hat) / var),
                 axis=axes)


def nelbo_many(predict: Predictor, schedule: Schedule, timesteps: Sequence[np.ndarray],
               x0: Array, key: Array, *,
               decoder_vars: Sequence[float | Array | None] | None = None,
               settings: BoundSettings = BoundSettings()) -> list[tuple[Array, Array]]:
  """:func:`nelbo` of several skip-step sequences (several K) in one program.

  Each sequence gets exactly the draws :func:`nelbo` gives it with the same ``key`` (its
  transition keys split from the same transition key, the prior and decoder draws shared),
  so ``nelbo_many(..., [ts_a, ts_b], ...)[i]`` equals ``nelbo(..., ts_i, ...)``; the
  transitions of every sequence go through one ``lax.map`` and the decoder's network call
  is made once per distinct first timestep. One compiled program then serves every K.

  Args:
    timesteps: a sequence of int [K_i] arrays, each increasing, first 1 and last N.
    decoder_vars: one ``decoder_var`` (see :func:`nelbo`) per sequence (default: None for
      every sequence).
    Others: as :func:`nelbo`.

  Returns:
    ``[(nelbo [B], terms [K_i + 1, B]) for each sequence]``.
  """
  lists = [np.asarray(ts) for ts in timesteps]
  decoder_vars = _check_sequences(lists, decoder_vars, settings.eta, schedule.num_steps)
  axes = tuple(range(1, x0.ndim))
  abar_n = jnp.asarray(schedule.abar)[schedule.num_steps]
  prior = jnp.sum(_gauss_kl(jnp.sqrt(abar_n) * x0, 1.0 - abar_n, 0.0, 1.0), axis=axes)

  key_trans, key_dec = jax.random.split(key)
  trans = _transition_terms(predict, schedule, lists, x0, key_trans, settings)

  noise = prng.normal(key_dec, x0.shape, x0.dtype)
  first = {}  # first timestep -> (x0_hat, x0_cov): one network call each
  for t0 in sorted({int(t[0]) for t in lists}):
    x_1 = q_sample(schedule, x0, jnp.full((x0.shape[0],), t0), noise)
    eps_hat, x0_cov = predict(x_1, jnp.asarray(t0))
    first[t0] = (predict_x0(schedule, x_1, jnp.asarray(t0), eps_hat, settings.clip_x0)[0],
                 x0_cov)

  out, offset = [], 0
  for seq, decoder_var in zip(lists, decoder_vars):
    x0_hat, x0_cov = first[int(seq[0])]
    decoder = _decoder_term(x0, x0_hat, x0_cov, decoder_var, settings.discrete_decoder)
    num = len(seq) - 1
    terms = jnp.concatenate([prior[None], trans[offset:offset + num], decoder[None]], axis=0)
    offset += num
    out.append((jnp.sum(terms, axis=0), terms))
  return out


def discretized_gaussian_log_prob(x0: Array, mean: Array, var: Array,
                                  num_bins: int = 256) -> Array:
  """log P(x0) of a Gaussian discretised to ``num_bins`` levels of [-1, 1] (elementwise).

  The bin of x0 is [x0 - 1/(num_bins - 1), x0 + 1/(num_bins - 1)], open to -inf / +inf at
  the first / last level (DDPM's decoder).
  """
  half = 1.0 / (num_bins - 1)
  inv_std = jax.lax.rsqrt(var)
  upper = (x0 - mean + half) * inv_std
  lower = (x0 - mean - half) * inv_std
  log_cdf_upper = jax.scipy.stats.norm.logcdf(upper)
  log_sf_lower = jax.scipy.stats.norm.logcdf(-lower)
  # log(Phi(upper) - Phi(lower)) computed on the side of the smaller tail.
  mid = jnp.where(
      lower > 0,
      log_sf_lower + jnp.log1p(-jnp.exp(jax.scipy.stats.norm.logcdf(-upper) - log_sf_lower)),
      log_cdf_upper + jnp.log1p(-jnp.exp(jax.scipy.stats.norm.logcdf(lower) - log_cdf_upper)))
  return jnp.where(x0 < -1 + half / 2, log_cdf_upper,
                   jnp.where(x0 > 1 - half / 2, log_sf_lower, mid))


def official_decoder_var(schedule: Schedule) -> float:
  """tilde_beta(1, 2) = beta_2 sigma_1^2 / sigma_2^2: the official decoder variance."""
  abar = schedule.abar
  return float((1 - abar[2] / abar[1]) * (1 - abar[1]) / (1 - abar[2]))


def beta_tilde_decoder_var(schedule: Schedule, timesteps: np.ndarray) -> float:
  """DDPM's convention for beta~ at the last step: reuse the previous step's lam~^2."""
  t, s = int(timesteps[1]), int(timesteps[0])
  abar = schedule.abar
  return float((1 - abar[t] / abar[s]) * (1 - abar[s]) / (1 - abar[t]))
