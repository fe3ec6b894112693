"""The exact two-token toy: a tabular AR model, CCA's expected loss in closed form (float64).

x = (x1, x2) in {0, ..., V-1}^2, K classes with p(c) given; the model is tabular AR,
p_theta(x1 | c) = softmax(A[c])[x1], p_theta(x2 | c, x1) = softmax(B[c, x1])[x2], so it can
represent every conditional distribution over the V^2 outcomes (ordered x1-major: 00, 01,
..., 0(V-1), 10, ...). Every function takes V from its arrays: ``conditionals`` is [K, V^2]
(the brief's toy has V = 2, outcomes 00, 01, 10, 11).

The expected CCA loss with pure negatives (pairs from p(x) p(c)) is

  E_{p(x, c)}[-log sigma(beta g)] + lambda E_{p(x) p(c)}[-log sigma(-beta g)]   (/ max(lambda, 1)),

g = log p_theta(x|c) - log p_phi(x|c); its minimiser over normalised models is found by a
damped Newton :class:`~jaxlib_papers.core.contract.Solver` and compared with the CFG target
p^s(x|c) ∝ p(x|c) [p(x|c) / p(x)]^s, s = 1 / beta, which it equals when lambda = Z_c(s)^beta.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxlib_papers.core import contract, prng

Array = jax.Array

# The brief's toy: K = 2, p(c) = 1/2, p(x | c=0) = (.4, .3, .2, .1), class 1 reversed.
TOY_CONDITIONALS = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]])
TOY_PRIOR = np.array([0.5, 0.5])


def outcomes(vocab: int) -> np.ndarray:
  """[V^2, 2] int32 token pairs (x1, x2) in the toy's x1-major order."""
  first, second = np.divmod(np.arange(vocab * vocab), vocab)
  return np.stack([first, second], axis=1).astype(np.int32)


OUTCOMES = outcomes(2)  # [4, 2]: 00, 01, 10, 11


def vocab_size(conditionals) -> int:
  """V of ``conditionals`` [K, V^2] (rows distributions over the V^2 outcomes), checked."""
  shape = np.shape(conditionals)
  vocab = int(round(np.sqrt(shape[-1]))) if len(shape) == 2 else 0
  if vocab < 2 or vocab * vocab != shape[-1]:
    raise ValueError("conditionals must be [K, V^2] with V >= 2 tokens per position (one "
                     f"column per token pair, x1-major); got shape {shape}")
  return vocab


def check_toy(conditionals, prior) -> int:
  """V of a toy ``conditionals`` [K, V^2] with ``prior`` [K]; a ValueError saying what is off."""
  vocab = vocab_size(conditionals)
  cond, prior = np.asarray(conditionals, float), np.asarray(prior, float)
  if prior.shape != (cond.shape[0],):
    raise ValueError(f"prior must be [K] = [{cond.shape[0]}] (one weight per row of "
                     f"conditionals); got shape {prior.shape}")
  for name, rows in (("conditionals", cond), ("prior", prior[None])):
    if np.any(rows <= 0) or np.any(np.abs(rows.sum(-1) - 1) > 1e-6):
      raise ValueError(f"every row of {name} must be a distribution with positive entries "
                       "summing to 1 (the toy takes logs of them)")
  return vocab


def tabular_params(conditionals: np.ndarray) -> dict[str, Array]:
  """Logits {"A": [K, V], "B": [K, V, V]} whose AR model equals ``conditionals`` [K, V^2]."""
  vocab = vocab_size(conditionals)
  p = jnp.asarray(conditionals).reshape(-1, vocab, vocab)    # [K, x1, x2]
  first = jnp.sum(p, axis=-1)                                # p(x1 | c)
  return {"A": jnp.log(first), "B": jnp.log(p / first[..., None])}


def tabular_logprob(params: dict[str, Array], labels: Array, tokens: Array) -> Array:
  """log p(x | c) [B] for labels [B] and tokens [B, 2] (the kernel's ``LogProbFn``)."""
  log_a = jax.nn.log_softmax(params["A"][labels], axis=-1)              # [B, V]
  log_b = jax.nn.log_softmax(params["B"][labels, tokens[:, 0]], axis=-1)  # [B, V]
  return (jnp.take_along_axis(log_a, tokens[:, :1], axis=-1)[:, 0]
          + jnp.take_along_axis(log_b, tokens[:, 1:], axis=-1)[:, 0])


def tabular_conditionals(params: dict[str, Array]) -> Array:
  """[K, V^2] p_theta(x | c) of tabular params."""
  num_classes, vocab = params["A"].shape
  labels = jnp.repeat(jnp.arange(num_classes), vocab * vocab)
  tokens = jnp.tile(jnp.asarray(outcomes(vocab)), (num_classes, 1))
  return jnp.exp(tabular_logprob(params, labels, tokens)).reshape(num_classes, vocab * vocab)


def expected_cca_loss(params: dict[str, Array], reference: dict[str, Array],
                      conditionals: Array, prior: Array, beta: float, lam: float) -> Array:
  """The exact expected CCA loss (pure negatives from p(x) p(c)), divided by max(lambda, 1)."""
  gap = jnp.log(tabular_conditionals(params)) - jnp.log(tabular_conditionals(reference))
  joint = prior[:, None] * conditionals                        # p(x, c)  [K, V^2]
  product = prior[:, None] * jnp.sum(joint, axis=0)[None]      # p(x) p(c)
  loss = (-jnp.sum(joint * jax.nn.log_sigmoid(beta * gap))
          - lam * jnp.sum(product * jax.nn.log_sigmoid(-beta * gap)))
  return loss / jnp.maximum(lam, 1.0)


def cfg_target(conditionals: np.ndarray, prior: np.ndarray, scale: float) -> np.ndarray:
  """Sequence-level CFG target p^s(x|c) ∝ p(x|c)^{1+s} p(x)^{-s}, [K, V^2]."""
  marginal = prior @ conditionals
  unnorm = conditionals ** (1.0 + scale) * marginal[None] ** (-scale)
  return unnorm / unnorm.sum(axis=1, keepdims=True)


def partition(conditionals: np.ndarray, prior: np.ndarray, scale: float) -> np.ndarray:
  """Z_c(s) = E_{p(x|c)}[(p(x|c) / p(x))^s], [K]."""
  marginal = prior @ conditionals
  return np.sum(conditionals * (conditionals / marginal[None]) ** scale, axis=1)


def token_cfg(conditionals: np.ndarray, prior: np.ndarray, scale: float) -> np.ndarray:
  """What token-level CFG samples: logits l_c + s (l_c - l_u) mixed at each of the 2 tokens,
  [K, V^2]."""
  def mixed(cond, uncond):
    logits = (1.0 + scale) * np.log(cond) - scale * np.log(uncond)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)
  vocab = vocab_size(conditionals)
  marginal = (prior @ conditionals).reshape(vocab, vocab)
  out = []
  for cond in conditionals:
    cond = cond.reshape(vocab, vocab)
    first = mixed(cond.sum(1), marginal.sum(1))
    second = mixed(cond / cond.sum(1, keepdims=True), marginal / marginal.sum(1, keepdims=True))
    out.append((first[:, None] * second).reshape(vocab * vocab))
  return np.stack(out)


class NewtonState(NamedTuple):
  flat: Array       # [P] float64 flattened logits
  grad_norm: Array  # [] float64
  iteration: Array  # [] int32


def newton_solver(loss_fn, unravel, *, tolerance: float = 1e-13, floor: float = 1e-10
                  ) -> contract.Solver:
  """Modified Newton on a flattened parameter vector, with a halving line search.

  The expected loss is convex in each log-ratio but not in the logits: plain Newton can stop
  at a saddle for large lambda. The Hessian's eigenvalues are replaced by their absolute
  values (floored), which keeps every step a descent step; the logits' shift invariance
  gives zero eigenvalues along directions where the gradient is zero too.
  """
  flat_loss = lambda flat: loss_fn(unravel(flat))

  def init_state(flat: Array) -> NewtonState:
    return NewtonState(flat, jnp.linalg.norm(jax.grad(flat_loss)(flat)), jnp.int32(0))

  def step(state: NewtonState) -> NewtonState:
    grad = jax.grad(flat_loss)(state.flat)
    eigenvalues, vectors = jnp.linalg.eigh(jax.hessian(flat_loss)(state.flat))
    curvature = jnp.maximum(jnp.abs(eigenvalues), floor)
    direction = vectors @ ((vectors.T @ grad) / curvature)
    current = flat_loss(state.flat)
    t = jax.lax.fori_loop(0, 40, lambda _, t: jnp.where(
        flat_loss(state.flat - t * direction) <= current, t, t / 2), jnp.ones((), grad.dtype))
    flat = state.flat - t * direction
    return NewtonState(flat, jnp.linalg.norm(jax.grad(flat_loss)(flat)), state.iteration + 1)

  return contract.Solver(init_state, step, lambda s: s.grad_norm < tolerance,
                         lambda s: unravel(s.flat))


def solve(conditionals: Array, prior: Array, beta: Array, lam: Array, max_iterations: int
          ) -> tuple[Array, Array]:
  """The optimum [K, V^2] of the expected CCA loss from phi = the data, and the final gradient
  norm [] (pure; :func:`exact_optimum` jits it with ``max_iterations`` static)."""
  reference = tabular_params(conditionals)
  flat, unravel = ravel_pytree(reference)
  solver = newton_solver(
      lambda p: expected_cca_loss(p, reference, conditionals, prior, beta, lam), unravel)
  result = contract.iterate(solver, flat, max_iterations=max_iterations)
  return tabular_conditionals(result.output), result.state.grad_norm


def exact_optimum(beta: float, lam: float, conditionals: np.ndarray = TOY_CONDITIONALS,
                  prior: np.ndarray = TOY_PRIOR, *, max_iterations: int = 200) -> np.ndarray:
  """p_theta*(x|c) [K, V^2] minimising the expected CCA loss with phi = the data (float64).

  Call under ``core.precision.enable_x64()``; raises if float64 is off, or if the solver
  stopped with a gradient norm above 1e-9.
  """
  if jnp.zeros(()).dtype != jnp.float64:
    raise RuntimeError("exact_optimum needs float64: wrap it in core.precision.enable_x64()")
  if not beta > 0 or not lam >= 0:
    raise ValueError(f"beta must be > 0 and lam >= 0; got beta={beta}, lam={lam}")
  check_toy(conditionals, prior)
  optimum, grad_norm = jax.jit(solve, static_argnames=("max_iterations",))(
      jnp.asarray(conditionals, jnp.float64), jnp.asarray(prior, jnp.float64),
      jnp.float64(beta), jnp.float64(lam), max_iterations)
  if not float(grad_norm) < 1e-9:
    raise RuntimeError(f"the toy solver did not converge (gradient norm {float(grad_norm)})")
  return np.asarray(optimum)


def best_fit_scale(distribution: np.ndarray, conditionals: np.ndarray = TOY_CONDITIONALS,
                   prior: np.ndarray = TOY_PRIOR, max_scale: float = 30.0) -> float:
  """The guidance scale s whose CFG target is KL-closest to ``distribution`` [K, V^2]."""
  from scipy.optimize import minimize_scalar  # pylint: disable=g-import-not-at-top
  def kl(scale):
    target = cfg_target(conditionals, prior, scale)
    return float(np.sum(distribution * (np.log(distribution) - np.log(target))))
  return float(minimize_scalar(kl, bounds=(0.0, max_scale), method="bounded",
                               options={"xatol": 1e-6}).x)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
  """Max over classes of 0.5 * sum |p - q| (rows are distributions)."""
  return float(np.max(0.5 * np.sum(np.abs(np.asarray(p) - np.asarray(q)), axis=-1)))


def sample_pairs(key: Array, batch: int, conditionals: np.ndarray = TOY_CONDITIONALS,
                 prior: np.ndarray = TOY_PRIOR) -> tuple[Array, Array]:
  """A minibatch from p(x, c): (tokens [B, 2], labels [B])."""
  k_c, k_x = jax.random.split(key)
  labels = prng.categorical(k_c, jnp.log(jnp.asarray(prior)), shape=(batch,))
  outcome = prng.categorical(k_x, jnp.log(jnp.asarray(conditionals))[labels])
  return jnp.asarray(outcomes(vocab_size(conditionals)))[outcome], labels.astype(jnp.int32)
