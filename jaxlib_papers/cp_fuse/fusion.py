"""The CP-Fuse weight rules: the per-step min-max problem, the official grid, the exact solver.

At a decoding step with next-token log-probabilities ``l_i = log p_i(. | y<t)`` and history
log-likelihoods ``S_i = log p_i(y<t)`` (generated tokens only, the prompt not counted),
CP-Fuse minimises over distributions q

    max_i F_i(q),   F_i(q) = KL(q || p_i(. | y<t)) - S_i,

within the family q ∝ exp(alpha l_1 + beta l_2). The official code searches a fixed grid of
(alpha, beta) pairs (:func:`grid_solve`). The KKT conditions put the optimum over *all* q
on q_lam ∝ p_1^lam p_2^(1 - lam) (alpha + beta = 1), and there the balance function

    g(lam) = F_1(q_lam) - F_2(q_lam) = E_{q_lam}[l_2 - l_1] + S_2 - S_1

is non-increasing in lam, so :func:`bisection_solver` (a ``core.contract.Solver``) finds the
exact optimum: lam = 0 when g(0) <= 0, lam = 1 when g(1) >= 0, else the root of g.

Shapes: ``logp1, logp2: [..., V]`` log-probabilities, ``history: [..., 2]`` (finite).
A log-probability may be ``-inf`` (a token a model rules out, e.g. after top-k masking):
the family then lives on the common support (:func:`fused_logits`), a token ruled out by
either model gets probability zero in q at every weight (alpha = 0 included, where
``0 * -inf`` would be NaN), and terms off the support contribute 0 (``0 log 0 = 0``). The
two supports must share a token. Nothing here is jitted.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxlib_papers.core import contract

Array = jax.Array


def official_grid(grid_size: int = 10) -> Array:
  """[grid_size - 1 + 9] float32: linspace(0, 2, grid_size) without its end, then 2..10."""
  if int(grid_size) < 2:
    raise ValueError(f"grid_size must be >= 2; got {grid_size}")
  return jnp.concatenate([jnp.linspace(0.0, 2.0, int(grid_size))[:-1],
                          jnp.linspace(2.0, 10.0, 9)]).astype(jnp.float32)


def grid_pairs(grid: Array) -> Array:
  """[G * G, 2] (alpha, beta) pairs, alpha the slow index (meshgrid 'ij', flattened)."""
  a, b = jnp.meshgrid(grid, grid, indexing="ij")
  return jnp.stack([a.reshape(-1), b.reshape(-1)], axis=-1)


def support(logp1: Array, logp2: Array) -> Array:
  """[..., V] bool: the tokens neither model rules out (log p_i > -inf for both)."""
  return ~(jnp.isneginf(logp1) | jnp.isneginf(logp2))


def fused_logits(alpha: Array, beta: Array, logp1: Array, logp2: Array) -> Array:
  """``alpha l_1 + beta l_2`` on the common support, -inf off it: [..., V].

  Args:
    alpha, beta: [...] weights (broadcast against the leading axes of ``logp1``).
    logp1, logp2: [..., V], possibly -inf.
  """
  mixed = alpha[..., None] * logp1 + beta[..., None] * logp2
  return jnp.where(support(logp1, logp2), mixed, -jnp.inf)


def per_model_objective(alpha: Array, beta: Array, logp1: Array, logp2: Array,
                        history: Array) -> Array:
  """F_i = KL(q || p_i) - S_i for q ∝ exp(alpha l_1 + beta l_2).

  Args:
    alpha, beta: [...] weights (broadcast against the leading axes of ``logp1``).
    logp1, logp2: [..., V], possibly -inf; history: [..., 2].

  Returns:
    [..., 2] the two models' objectives.
  """
  on = support(logp1, logp2)
  log_q = jax.nn.log_softmax(fused_logits(alpha, beta, logp1, logp2), axis=-1)
  q = jnp.exp(log_q)
  kl1 = jnp.sum(jnp.where(on, q * (log_q - logp1), 0.0), axis=-1)
  kl2 = jnp.sum(jnp.where(on, q * (log_q - logp2), 0.0), axis=-1)
  return jnp.stack([kl1, kl2], axis=-1) - history


def objective(alpha: Array, beta: Array, logp1: Array, logp2: Array, history: Array) -> Array:
  """J(alpha, beta) = max_i F_i: [...]."""
  return jnp.max(per_model_objective(alpha, beta, logp1, logp2, history), axis=-1)


def check_step_inputs(logp1: Array, logp2: Array, history: Array) -> None:
  """Raises ValueError unless logp1, logp2 are [B, V] of one shape and history is [B, 2]."""
  if logp1.ndim != 2 or logp1.shape != logp2.shape:
    raise ValueError(f"logp1 and logp2 must both be [B, V]; got {logp1.shape} and "
                     f"{logp2.shape}")
  if history.shape != (logp1.shape[0], 2):
    raise ValueError(f"history must be [B, 2] = [{logp1.shape[0]}, 2]; got {history.shape}")


class Weights(NamedTuple):
  alpha: Array      # [...] float32, weight of log p_1
  beta: Array       # [...] float32, weight of log p_2
  objective: Array  # [...] float32, J at (alpha, beta)


def grid_solve(logp1: Array, logp2: Array, history: Array, pairs: Array) -> Weights:
  """The official rule: the first (alpha, beta) of ``pairs`` minimising J.

  Args:
    logp1, logp2: [B, V]; history: [B, 2]; pairs: [K, 2] from :func:`grid_pairs`.
  """
  check_step_inputs(logp1, logp2, history)
  chex.assert_shape(pairs, (None, 2))
  values = objective(pairs[None, :, 0], pairs[None, :, 1], logp1[:, None], logp2[:, None],
                     history[:, None])                                  # [B, K]
  best = jnp.argmin(values, axis=-1)
  return Weights(pairs[best, 0], pairs[best, 1], jnp.take_along_axis(
      values, best[:, None], axis=-1)[:, 0])


def balance(lam: Array, logp1: Array, logp2: Array, history: Array) -> Array:
  """g(lam) = F_1(q_lam) - F_2(q_lam) = E_q[l_2 - l_1] + S_2 - S_1: [...]."""
  q = jax.nn.softmax(fused_logits(lam, 1.0 - lam, logp1, logp2), axis=-1)
  gap = jnp.where(support(logp1, logp2), q * (logp2 - logp1), 0.0)
  return jnp.sum(gap, axis=-1) + history[..., 1] - history[..., 0]


class BisectionState(NamedTuple):
  low: Array       # [B] float32, g(low) > 0 (or the corner)
  high: Array      # [B] float32, g(high) < 0 (or the corner)
  logp1: Array     # [B, V] float32
  logp2: Array     # [B, V] float32
  history: Array   # [B, 2] float32


def bisection_solver(tolerance: float = 0.0) -> contract.Solver:
  """The exact per-step solver as a ``core.contract.Solver`` (run with ``contract.iterate``).

  ``init_state(logp1 [B, V], logp2 [B, V], history [B, 2])`` settles the corners (lam = 0
  when g(0) <= 0, lam = 1 when g(1) >= 0); each ``step`` halves [low, high] of the rows
  with an interior root; ``done`` when every bracket is at most ``tolerance`` wide;
  ``output`` is :class:`Weights` at lam = (low + high) / 2 with alpha = lam, beta = 1 - lam.
  """

  def init_state(logp1, logp2, history):
    check_step_inputs(logp1, logp2, history)
    zeros = jnp.zeros(logp1.shape[:1], jnp.float32)
    at_zero = balance(zeros, logp1, logp2, history) <= 0.0
    at_one = balance(zeros + 1.0, logp1, logp2, history) >= 0.0
    low = jnp.where(at_zero, 0.0, jnp.where(at_one, 1.0, 0.0))
    high = jnp.where(at_zero, 0.0, 1.0)
    return BisectionState(low, high, logp1, logp2, history)

  def step(state):
    mid = 0.5 * (state.low + state.high)
    positive = balance(mid, state.logp1, state.logp2, state.history) > 0.0
    return state._replace(low=jnp.where(positive, mid, state.low),
                          high=jnp.where(positive, state.high, mid))

  def done(state):
    return jnp.all(state.high - state.low <= tolerance)

  def output(state):
    lam = 0.5 * (state.low + state.high)
    return Weights(lam, 1.0 - lam, objective(lam, 1.0 - lam, state.logp1, state.logp2,
                                             state.history))

  return contract.Solver(init_state, step, done, output)


def exact_solve(logp1: Array, logp2: Array, history: Array, iterations: int = 40) -> Weights:
  """The exact min-max weights by bisection on g (``iterations`` halvings at most)."""
  return contract.iterate(bisection_solver(), logp1, logp2, history,
                          max_iterations=iterations).output


def fixed_weights(alpha: float | Array, beta: float | Array, logp1: Array, logp2: Array,
                  history: Array) -> Weights:
  """A static rule (single models, CP-Delta) with J reported for comparison: [B]."""
  shape = logp1.shape[:-1]
  a = jnp.broadcast_to(jnp.asarray(alpha, jnp.float32), shape)
  b = jnp.broadcast_to(jnp.asarray(beta, jnp.float32), shape)
  return Weights(a, b, objective(a, b, logp1, logp2, history))
