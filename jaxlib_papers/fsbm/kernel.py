"""FSBM kernels: CondSOC (R-step), bridge matching (M-step), sampling, alternation.

Every function is pure and jit-free; `core.train_loop` (or a test) jits them.
Shapes: B endpoint pairs, D state dims, N noise draws per pair, S CondSOC grid
points, T = T_mean mean knots, M the M-step batch.

The paper's equations are the module-level functions over settings NamedTuples
(``condsoc_pair_loss``, ``bridge_matching_loss``, ``path_drift_at``, ``simulate``);
the alternation composes them with the core blocks. One alternation
(``train_step`` = :func:`alternation`) is one compiled program:
  1. endpoint pairs (:func:`initial_mean_path`): round 0 uses independent (x0, x1)
     with straight-line mean knots; round k >= 1 simulates the EMA model of the
     other direction (k odd: forward from x0, k even: backward from x1) and takes
     its path at the T_mean knot times;
  2. R-step (:func:`condsoc_solve`): the CondSOC solve over all B pairs at once
     (vmap over pairs, lax.scan over SGD iterations), anchored at the simulated
     direction;
  3. M-step (:func:`m_step`): ``blocks.scan_steps`` of ``match_steps`` steps
     (``blocks.gradient_step`` with AdamW, then ``blocks.ema_update``) regressing
     the trained direction's network (round 0 and even rounds: forward, odd:
     backward) on the fitted paths' drifts.
tau is data of the batch (``batch["tau"]``, one weight per pair), so tau = 0
(the unguided DSBM-like baseline) runs through the very same compiled program.

Reference drifts. ``base_drift`` is None, a plain f(t, x), or a mean-field
drift (an object with ``drift(t, x, field)``, ``field_from(sample_at)`` and
``field_shape``, e.g. ``opinion.PolarizeDrift``) whose value depends on the
population through a table ``field`` kept in the kernel state (None for the
other drifts, so the state has no zero-size leaf to checkpoint). The table is
built from the population of Gaussian paths: at round 0 from the initial
straight-line paths, and after every R-step from the freshly fitted paths; the
R-step uses the table it starts with, the M-step targets and all later
simulations use the refreshed one (the order of the official code).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxlib_papers.core import blocks, contract, prng, sde
from jaxlib_papers.fsbm import feedback, gpath, models

PyTree = Any
# f(t [S] or [], x [..., D]) -> [..., D]: the reference (base) drift; None = 0.
BaseDrift = Callable[[jax.Array, jax.Array], jax.Array] | None
# V(x [..., D]) -> [...]: a known state cost added to the CondSOC objective.
StateCost = Callable[[jax.Array], jax.Array] | None
# C(x [..., D], y [..., D]) -> [...]: an interaction cost between a path sample x and a
# partner y, another path sample at the same time (GSBM's congestion).
InteractionCost = Callable[[jax.Array, jax.Array], jax.Array] | None


class MeanFieldDrift(Protocol):
  """A reference drift that depends on the population law through a table."""

  field_shape: tuple[int, ...]

  def drift(self, t: jax.Array, x: jax.Array, field: jax.Array) -> jax.Array:
    ...

  def field_from(self, sample_at: Callable[[jax.Array, jax.Array], jax.Array]
                 ) -> jax.Array:
    ...


# ----------------------------------------------------------------------------
# CondSOC (R-step)
# ----------------------------------------------------------------------------


class CondSOCSettings(NamedTuple):
  """Static CondSOC settings (hashable, closed over by the kernels)."""

  sigma: float
  num_mean_knots: int       # T_mean
  num_gamma_knots: int      # T_gamma
  num_steps: int            # S, time grid size (= keypoint grid size)
  num_noise: int            # N, paths per pair per iteration
  lr_mean: float
  lr_gamma: float
  num_iters: int
  micro_batch: int          # mB: the official loss is a mean over mB pairs
  momentum: float = 0.0
  eps: float = 1e-3         # grid = linspace(eps, 1 - eps, S)
  # Safeguard (ours): a pair whose loss exceeds safe_ratio x its lowest loss so far,
  # or is not finite, is sent back to that best iterate and retakes its gradient with
  # half its step (backtracking); 0 turns the safeguard off.
  safe_ratio: float = 0.0
  # Pairs per chunk of the gradient (ours, a speed setting): > 0 computes each
  # iteration's gradient over B / pair_chunk strided chunks of pairs, one after another
  # (``lax.map``), so a chunk's [chunk, N, S, D] arrays stay in cache on a CPU; every
  # pair's gradient is the same (pairs are independent problems). 0 = all B at once.
  # Ignored when B is not a multiple (the launcher's config refuses such a chunk), or
  # with an interaction or entropy cost (they couple the pairs).
  pair_chunk: int = 0


def time_grid(settings: CondSOCSettings, dtype=jnp.float32) -> jax.Array:
  """[S] CondSOC time grid linspace(eps, 1 - eps, S)."""
  return jnp.linspace(settings.eps, 1.0 - settings.eps, settings.num_steps,
                      dtype=dtype)


class Guidance(NamedTuple):
  """What steers the CondSOC paths besides the endpoints (one per R-step)."""

  keypoints: jax.Array            # [K, S, D] aligned trajectories on the CondSOC grid
  inv_std: jax.Array              # [S, D] from ``feedback.keypoint_inv_std``
  base_drift: BaseDrift = None    # the reference drift f(t, x) (None = 0)
  state_cost: StateCost = None    # a known state cost V(x) (None = 0, as in FSBM)
  # C(x, y) beside V, weighted with it (w (V + C)); y is another path's sample
  # (``condsoc_solve`` pairs all B N paths at random each iteration, whatever their
  # pair's weight, so pairs of different weights in one batch are coupled). None = 0.
  interaction_cost: InteractionCost = None
  # E(x) = entropy_scale log p_t(x) beside V and C, weighted with them (w (V + C + E)):
  # p_t is the mixture of the Gaussian path marginals N(mu_t, gamma_t^2 I) of the pair's
  # population, its micro-batch of mB pairs (detached; GSBM's entropy interaction cost;
  # ``_population_log_densities``). 0 = off.
  entropy_scale: float = 0.0


class CondSOCProblem(NamedTuple):
  """One pair's CondSOC objective without its weights: the grid and the guidance."""

  sigma: float                    # diffusion coefficient
  t: jax.Array                    # [S] time grid (must match the keypoint grid)
  guide: Guidance


class PairWeights(NamedTuple):
  """The per-pair numbers of the objective (traced is fine)."""

  sign: ArrayLike                 # +1.0 forward / -1.0 backward anchoring
  tau: ArrayLike                  # feedback weight (0: the unguided objective)
  state_weight: ArrayLike = 1.0   # w, the weight of V (0: FSBM's objective)


class LossTerms(NamedTuple):
  """Static switches that leave out terms multiplied by zero."""

  # False: the objective of tau = 0 without computing the two feedback terms.
  with_feedback: bool = True
  # False: the objective of state_weight = 0 without evaluating V (and its gradient).
  with_state: bool = True


def condsoc_pair_loss(params: gpath.PathParams, x0: jax.Array, x1: jax.Array,
                      noise: jax.Array, problem: CondSOCProblem, weights: PairWeights,
                      terms: LossTerms = LossTerms(), partner: jax.Array | None = None):
  """CondSOC objective of one pair, a mean over its N paths and S times.

  L = mean_{n,t} [ ||u_t||^2 / (2 sigma^2) + tau |<grad G, u_t>| + tau sum_d (H 1)_d
                   + w (V(X_t) + C(X_t, Y_t)) ]
  with u_t the path drift minus the signed base drift, w V an optional known state cost
  and w C an optional interaction cost with partner samples Y (the GSBM-style baseline;
  both None = 0, as in FSBM).

  Args:
    params: the pair's spline parameters.
    x0, x1: [D] endpoints.
    noise: [N, S, D] standard normals.
    problem: sigma, the [S] grid and the guidance (keypoints, base drift, state and
      interaction costs).
    weights: sign, tau and the state cost's weight w.
    terms: which terms to compute (static).
    partner: [N, S, D] the partners Y of the N paths (needed with an interaction cost).

  Returns:
    (loss [], aux dict of [] scalars: control, feedback, divergence, state).
  """
  x, u = gpath.sample_and_drift(params, x0, x1, problem.sigma, problem.t, noise, weights.sign)
  return path_loss(x, u, problem, weights, terms, partner)


def _has_state(guide: Guidance) -> bool:
  """Whether the objective has any of the given state terms V, C, E."""
  return (guide.state_cost is not None or guide.interaction_cost is not None
          or bool(guide.entropy_scale))


def population_log_density(x: jax.Array, means: jax.Array, stds: jax.Array) -> jax.Array:
  """log p_t(x) under the equal mixture of P isotropic Gaussians at each time.

  p_t = (1 / P) sum_p N(means[p, t], stds[p, t]^2 I): the population's Gaussian path
  marginals (GSBM's entropy cost, a log-sum-exp instead of its log of a mean of exps).

  Args:
    x: [..., S, D] samples.
    means: [P, S, D]; stds: [P, S] (> 0).

  Returns:
    [..., S].
  """
  dim = x.shape[-1]
  sq = jnp.sum((x[..., None, :, :] - means) ** 2, axis=-1)              # [..., P, S]
  log_n = (-0.5 * sq / stds**2 - dim * jnp.log(stds)
           - 0.5 * dim * np.log(2.0 * np.pi))
  return jax.nn.logsumexp(log_n, axis=-2) - np.log(means.shape[0])


def _log_density_and_grad(x: jax.Array, means: jax.Array, stds: jax.Array):
  """(:func:`population_log_density` [M, S], its gradient in x [M, S, D]) of x [M, S, D].

  One time at a time (``lax.map`` over S): the [M, P] logits of a time stay in cache,
  the cross term is one [M, D] x [D, P] product, and the gradient
  sum_p r_p (mu_p - x) / gamma_p^2 (r the mixture's responsibilities) comes from two
  products of the same pass.
  """
  dim, count = x.shape[-1], means.shape[0]

  def one_time(args):
    xs, mus, sds = args                                  # [M, D], [P, D], [P]
    inv = 1.0 / sds**2
    scaled = mus * inv[:, None]
    logits = (xs @ scaled.T - 0.5 * jnp.sum(xs**2, -1, keepdims=True) * inv[None]
              - (0.5 * jnp.sum(mus**2, -1) * inv + dim * jnp.log(sds))[None])
    lse = jax.nn.logsumexp(logits, axis=1)
    resp = jnp.exp(logits - lse[:, None])
    grad = resp @ scaled - (resp @ inv)[:, None] * xs
    return lse - 0.5 * dim * np.log(2.0 * np.pi) - np.log(count), grad

  density, grad = jax.lax.map(one_time, (jnp.swapaxes(x, 0, 1), jnp.swapaxes(means, 0, 1),
                                         stds.T))
  return jnp.swapaxes(density, 0, 1), jnp.swapaxes(grad, 0, 1)


@jax.custom_vjp
def _detached_log_density(x: jax.Array, means: jax.Array, stds: jax.Array) -> jax.Array:
  """:func:`population_log_density` of x [M, S, D], differentiable in x only (the
  mixture's means and stds are constants: GSBM detaches them); ~13x faster than
  differentiating the reference at V-neck's sizes (B N = 1024, P = 256, S = 100: 51
  against 647 ms on one core, value and gradient)."""
  return _log_density_and_grad(x, means, stds)[0]


def _detached_bwd(grad, cotangent):
  return cotangent[..., None] * grad, None, None


# The forward pass's residual is the gradient in x that the same pass computes.
_detached_log_density.defvjp(_log_density_and_grad, _detached_bwd)


def _state_term(x: jax.Array, guide: Guidance, weight: ArrayLike,
                partner: jax.Array | None, log_density: jax.Array | None) -> jax.Array:
  """w (V(x) + C(x, partner) + E(x)) [N, S] (the terms that are given)."""
  cost = jnp.zeros(x.shape[:-1], x.dtype)
  if guide.state_cost is not None:
    cost = cost + guide.state_cost(x)
  if guide.interaction_cost is not None:
    if partner is None:
      raise ValueError("an interaction cost needs the partner samples (partner=None)")
    chex.assert_equal_shape([x, partner])
    cost = cost + guide.interaction_cost(x, partner)
  if guide.entropy_scale:
    if log_density is None:
      raise ValueError("an entropy cost needs the population log-density (log_density=None)")
    cost = cost + guide.entropy_scale * log_density
  return weight * cost


def path_loss(x: jax.Array, u: jax.Array, problem: CondSOCProblem, weights: PairWeights,
              terms: LossTerms = LossTerms(), partner: jax.Array | None = None,
              log_density: jax.Array | None = None):
  """:func:`condsoc_pair_loss` from the pair's samples x [N, S, D] and path drifts u
  [N, S, D] (before the base drift is taken off); ``log_density`` [N, S]: the samples'
  population log-density (needed with an entropy cost)."""
  sigma, t, guide, sign = problem.sigma, problem.t, problem.guide, weights.sign
  if guide.base_drift is not None:
    u = u - sign * guide.base_drift(t[None, :], x)
  control = jnp.sum(u**2, axis=-1) / (2.0 * sigma**2)                  # [N, S]
  state = (_state_term(x, guide, weights.state_weight, partner, log_density)
           if _has_state(guide) and terms.with_state else jnp.zeros_like(control))
  if not terms.with_feedback:
    zero = jnp.zeros((), control.dtype)
    loss = jnp.mean(control + state)
    return loss, dict(control=jnp.mean(control), feedback=zero, divergence=zero,
                      state=jnp.mean(state))
  ref_index = jnp.where(jnp.asarray(sign) > 0, 0, t.shape[0] - 1)
  _, grad_g, hess_ones = jax.vmap(
      lambda xn: feedback.feedback_terms(xn, guide.keypoints, guide.inv_std, ref_index))(x)
  guide_term = jnp.abs(jnp.sum(grad_g * u, axis=-1))                  # [N, S]
  divergence = jnp.sum(hess_ones, axis=-1)                            # [N, S]
  loss = jnp.mean(control + weights.tau * guide_term + weights.tau * divergence + state)
  aux = dict(control=jnp.mean(control), feedback=jnp.mean(guide_term),
             divergence=jnp.mean(divergence), state=jnp.mean(state))
  return loss, aux


def condsoc_optimizer(settings: CondSOCSettings) -> optax.GradientTransformation:
  """SGD with separate learning rates for the mean and std knots."""
  return optax.multi_transform(
      {"mean": optax.sgd(settings.lr_mean, momentum=settings.momentum or None),
       "gamma": optax.sgd(settings.lr_gamma, momentum=settings.momentum or None)},
      gpath.PathParams(mean_knots="mean", gamma_knots="gamma"))


class _Solve(NamedTuple):
  """One CondSOC solve's fixed inputs (all B pairs)."""

  settings: CondSOCSettings
  problem: CondSOCProblem
  x0: jax.Array                    # [B, D]
  x1: jax.Array                    # [B, D]
  weights: PairWeights             # sign [], tau [B], state_weight [B]
  tx: optax.GradientTransformation
  key: jax.Array
  noise_shape: tuple[int, ...]     # [B, N, S, D]


def _noise_at(solve: _Solve, it: jax.Array) -> jax.Array:
  return prng.normal(jax.random.fold_in(solve.key, it), solve.noise_shape, solve.x0.dtype)


def _objective(p: gpath.PathParams, noise: jax.Array, solve: _Solve, terms: LossTerms,
               partners: jax.Array | None = None):
  """(sum of the per-pair losses / mB, [B] per-pair losses). ``partners``: [B N] indices
  into the flattened [B N] paths, the partner of each path in the interaction cost."""
  w, problem = solve.weights, solve.problem
  x, u = jax.vmap(lambda pp, a, b, n: gpath.sample_and_drift(
      pp, a, b, problem.sigma, problem.t, n, w.sign))(p, solve.x0, solve.x1, noise)
  partner = None
  if partners is not None:
    # Not detached (as GSBM): a path's gradient also has its term as another's partner.
    partner = x.reshape((-1,) + x.shape[2:])[partners].reshape(x.shape)
  log_density = None
  if problem.guide.entropy_scale and terms.with_state:
    log_density = _population_log_densities(p, x, solve)
  losses, _ = jax.vmap(
      lambda xx, uu, tau, v, y, ld: path_loss(
          xx, uu, problem, PairWeights(sign=w.sign, tau=tau, state_weight=v), terms, y, ld))(
              x, u, w.tau, w.state_weight, partner, log_density)
  return jnp.sum(losses) / solve.settings.micro_batch, losses


def entropy_groups(num_pairs: int, micro_batch: int) -> int:
  """Pairs per entropy population: mB when it divides B, else all B pairs (B <= mB)."""
  if num_pairs <= micro_batch:
    return num_pairs
  if num_pairs % micro_batch:
    raise ValueError(f"an entropy cost needs the number of pairs B ({num_pairs}) to be at "
                     f"most, or a multiple of, the micro-batch mB ({micro_batch})")
  return micro_batch


def _population_log_densities(p: gpath.PathParams, x: jax.Array, solve: _Solve
                              ) -> jax.Array:
  """[B, N, S] log-density of each sample under its micro-batch's path marginals.

  The pairs form B / mB consecutive groups of mB (the pairs of a batch are drawn at
  random, so a group is a random micro-batch, as GSBM's); the marginals are detached.
  """
  problem = solve.problem
  means, _, stds, _ = jax.vmap(lambda pp, a, b: gpath.mean_and_std(
      pp, a, b, problem.sigma, problem.t))(p, solve.x0, solve.x1)
  means, stds = jax.lax.stop_gradient(means), jax.lax.stop_gradient(stds)
  size = entropy_groups(x.shape[0], solve.settings.micro_batch)
  groups = x.shape[0] // size
  samples = x.reshape((groups, size * x.shape[1]) + x.shape[2:])     # [G, mB N, S, D]
  grouped = lambda a: a.reshape((groups, size) + a.shape[1:])
  density = jax.vmap(_detached_log_density)(samples, grouped(means), grouped(stds))
  return density.reshape(x.shape[:-1])


def _partners_at(solve: _Solve, terms: LossTerms, it: jax.Array) -> jax.Array | None:
  """Iteration it's random pairing of the B N paths for the interaction cost (GSBM: a
  random permutation of the paths), or None when the objective has no interaction."""
  if solve.problem.guide.interaction_cost is None or not terms.with_state:
    return None
  num_paths = solve.noise_shape[0] * solve.noise_shape[1]
  key = jax.random.fold_in(jax.random.fold_in(solve.key, it), 1)
  return jax.random.permutation(key, num_paths)


def _per_pair(mask: jax.Array, a: PyTree, b: PyTree) -> PyTree:
  """a where mask (one flag per pair, leading axis) else b."""
  return jax.tree.map(
      lambda u, v: jnp.where(mask.reshape((-1,) + (1,) * (u.ndim - 1)), u, v), a, b)


def _safe_update(solve: _Solve, p, s, last, grads, losses):
  """The safeguarded SGD step (see :func:`condsoc_solve`): (params, opt state, last,
  reported mean loss, rejected pair count)."""
  p_best, g_best, loss_best, scale = last
  finite = jnp.isfinite(losses) & jax.vmap(
      lambda g: jnp.all(jnp.stack([jnp.all(jnp.isfinite(v))
                                   for v in jax.tree.leaves(g)])))(grads)
  accept = finite & (losses <= solve.settings.safe_ratio * loss_best)
  improved = accept & (losses < loss_best)
  scale = jnp.where(accept, scale, 0.5 * scale)
  base = _per_pair(accept, p, p_best)
  grad = _per_pair(accept, grads, g_best)
  scaled = jax.tree.map(lambda g: g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), grad)
  updates, s = solve.tx.update(scaled, s, base)
  last = (_per_pair(improved, p, p_best), _per_pair(improved, grads, g_best),
          jnp.where(improved, losses, loss_best), scale)
  # The reported mean is over the losses at the iterates stepped from (a
  # rejected loss may be Inf): the new loss if accepted, the best one if not.
  return (optax.apply_updates(base, updates), s, last,
          jnp.mean(jnp.where(accept, losses, loss_best)), jnp.sum(~accept).astype(jnp.int32))


def _num_chunks(solve: _Solve, terms: LossTerms) -> int:
  """How many pair chunks the gradient is computed in (1: all pairs at once)."""
  chunk, num_pairs = solve.settings.pair_chunk, solve.noise_shape[0]
  coupled = terms.with_state and (solve.problem.guide.interaction_cost is not None
                                  or bool(solve.problem.guide.entropy_scale))
  if chunk <= 0 or chunk >= num_pairs or num_pairs % chunk or coupled:
    return 1
  return num_pairs // chunk


def _chunked_gradient(solve: _Solve, terms: LossTerms, p, noise, num_chunks: int):
  """(grads, [B] losses) of :func:`_objective`, over ``num_chunks`` strided chunks of
  pairs (chunk i: pairs i, i + c, i + 2c, ...) in a ``lax.map``. Strided, so that pairs
  sharded over devices in contiguous blocks keep every chunk spread over all devices."""
  num_pairs = noise.shape[0]
  split = lambda a: jnp.swapaxes(a.reshape((num_pairs // num_chunks, num_chunks) + a.shape[1:]),
                                 0, 1)
  merge = lambda a: jnp.swapaxes(a, 0, 1).reshape((num_pairs,) + a.shape[2:])
  w = solve.weights

  def one(args):
    pc, nc, x0, x1, tau, weight = args
    sub = solve._replace(x0=x0, x1=x1, weights=PairWeights(w.sign, tau, weight),
                         noise_shape=nc.shape)
    return jax.grad(_objective, has_aux=True)(pc, nc, sub, terms)

  grads, losses = jax.lax.map(one, jax.tree.map(
      split, (p, noise, solve.x0, solve.x1, w.tau, w.state_weight)))
  return jax.tree.map(merge, grads), merge(losses)


def _solve_step(solve: _Solve, terms: LossTerms, carry, it):
  """One CondSOC iteration over all pairs (a ``lax.scan`` body)."""
  # Iteration it's noise arrives in the carry and the next one's is drawn here: drawn
  # inside the differentiated objective, XLA fuses the random-bit generation into each of
  # its consumers and recomputes it. The draws are the same: fold_in(key, it).
  p, s, last, noise = carry
  next_noise = _noise_at(solve, it + 1)
  num_chunks = _num_chunks(solve, terms)
  if num_chunks > 1:
    grads, losses = _chunked_gradient(solve, terms, p, noise, num_chunks)
  else:
    grads, losses = jax.grad(_objective, has_aux=True)(p, noise, solve, terms,
                                                       _partners_at(solve, terms, it))
  grads = gpath.pin_std_ends(grads)
  if not solve.settings.safe_ratio > 0:
    updates, s = solve.tx.update(grads, s, p)
    return (optax.apply_updates(p, updates), s, last, next_noise), (
        jnp.mean(losses), jnp.zeros((), jnp.int32))
  p, s, last, mean_loss, rejected = _safe_update(solve, p, s, last, grads, losses)
  return (p, s, last, next_noise), (mean_loss, rejected)


def _solve_scan(solve: _Solve, terms: LossTerms, params, opt_state, last):
  """The branch of one combination of terms: ``num_iters`` iterations as one scan."""
  return lambda: jax.lax.scan(functools.partial(_solve_step, solve, terms),
                              (params, opt_state, last, _noise_at(solve, 0)),
                              jnp.arange(solve.settings.num_iters))


def _solve_branches(solve: _Solve, params, opt_state, last):
  """(params, losses, rejected) of the scan of the branch the pairs' weights select."""
  branch = lambda fb, st: _solve_scan(solve, LossTerms(fb, st), params, opt_state, last)
  tau, state_weight = solve.weights.tau, solve.weights.state_weight
  # When every pair has tau = 0 (the unguided and GSBM-style baselines) the feedback terms
  # are multiplied by zero, and when every pair has state_weight = 0 (FSBM and tau = 0)
  # so is the known state cost: a branch per combination leaves out what is multiplied by
  # zero (the feedback terms are ~50% of an iteration, the S-tunnel obstacle cost ~30%),
  # and one compiled program still serves every tau and weight. (The branch is taken around
  # the whole scan, so each iteration compiles exactly as it would without the branch.)
  with_feedback = jnp.any(tau != 0)
  guide = solve.problem.guide
  if not _has_state(guide):
    (params, _, _, _), (losses, rejected) = jax.lax.cond(
        with_feedback, branch(True, False), branch(False, False))
  else:
    index = 2 * with_feedback.astype(jnp.int32) + jnp.any(state_weight != 0).astype(jnp.int32)
    (params, _, _, _), (losses, rejected) = jax.lax.switch(
        index, [branch(False, False), branch(False, True), branch(True, False),
                branch(True, True)])
  return params, losses, rejected


def condsoc_solve(x0: jax.Array, x1: jax.Array, mean_path: jax.Array,
                  key: jax.Array, *, settings: CondSOCSettings, guide: Guidance,
                  weights: PairWeights, with_stats: bool = False):
  """Fits one Gaussian path per endpoint pair: one program for all B pairs.

  The per-pair losses are summed and divided by ``settings.micro_batch``, so
  each pair's gradient (and hence its SGD step) is exactly what the official
  code gives with micro-batches of mB pairs, independently of B and of how the
  pairs are sharded. Noise at iteration i is one [B, N, S, D] draw from
  fold_in(key, i); with JAX's partitionable threefry (the default) each device
  draws its own slice and the values do not depend on the sharding.

  Safeguard (``settings.safe_ratio`` > 0, ours): plain SGD at the official rate
  diverges for a pair whose objective is too curved for it (seen on V-neck pairs
  through the neck when the keypoints' spread there is small). Each pair keeps the
  iterate with its lowest loss so far (with that loss and gradient); when its loss at
  a new iterate is not finite or exceeds ``safe_ratio`` times the lowest one, the step
  is rejected: the pair goes back to its best iterate and retakes that gradient with
  half its previous step (the step scale stays halved from then on). A pair that is
  never rejected follows the official SGD exactly.

  Interaction cost (``guide.interaction_cost``, GSBM's congestion): each iteration pairs
  the B N paths by a random permutation (fold_in(fold_in(key, i), 1)), and C(X_t, Y_t)
  is taken against the partner's sample at the same time, not detached (GSBM permutes
  within micro-batches of mB pairs, here all B: the same when B <= mB).

  Args:
    x0, x1: [B, D] endpoints.
    mean_path: [B, T_mean, D] initial mean knots (endpoints must equal x0/x1).
    key: PRNG key.
    settings: CondSOC settings.
    guide: keypoints [K, S, D], inv_std [S, D], optional base drift, state cost V and
      interaction cost C.
    weights: sign (+1.0 forward / -1.0 backward), tau and the weight of V, each [] or
      [B] (one per pair).
    with_stats: also return the number of rejected pair-steps per iteration.

  Returns:
    (params: PathParams with leading B axis, losses: [num_iters] mean per-pair
    loss at each iteration, before its update) and, with ``with_stats``,
    rejected: [num_iters] int32 pairs whose step was rejected at that iteration.
  """
  chex.assert_rank([x0, x1, mean_path], [2, 2, 3])
  num_pairs, dim = x0.shape
  chex.assert_shape(mean_path, (num_pairs, settings.num_mean_knots, dim))
  t = time_grid(settings, x0.dtype)
  params = jax.vmap(lambda p: gpath.init_params(p, settings.num_gamma_knots))(mean_path)
  tx = condsoc_optimizer(settings)
  opt_state = tx.init(params)
  tau = jnp.broadcast_to(jnp.asarray(weights.tau, x0.dtype), (num_pairs,))
  state_weight = jnp.broadcast_to(jnp.asarray(weights.state_weight, x0.dtype), (num_pairs,))
  solve = _Solve(settings, CondSOCProblem(settings.sigma, t, guide), x0, x1,
                 PairWeights(weights.sign, tau, state_weight), tx, key,
                 (num_pairs, settings.num_noise, settings.num_steps, dim))
  last = (params, jax.tree.map(jnp.zeros_like, params),
          jnp.full((num_pairs,), jnp.inf, x0.dtype), jnp.ones((num_pairs,), x0.dtype))
  params, losses, rejected = _solve_branches(solve, params, opt_state, last)
  if with_stats:
    return params, losses, rejected
  return params, losses


# ----------------------------------------------------------------------------
# Bridge matching (M-step) and sampling
# ----------------------------------------------------------------------------


def path_drift_at(params: gpath.PathParams, x0: jax.Array, x1: jax.Array,
                  t: jax.Array, noise: jax.Array, *, sigma: float,
                  sign: ArrayLike, base_drift: BaseDrift = None):
  """One sample X_t of one pair's path and its (base-removed) drift.

  Args:
    params: one pair's spline parameters; x0, x1: [D]; t: []; noise: [D].

  Returns:
    (x [D], u [D]).
  """
  x, u = gpath.sample_and_drift(params, x0, x1, sigma, t[None], noise[None, None],
                                sign)
  x, u = x[0, 0], u[0, 0]
  if base_drift is not None:
    u = u - sign * base_drift(t, x)
  return x, u


def bridge_matching_loss(net_params: PyTree, apply_fn, xt: jax.Array,
                         t: jax.Array, target: jax.Array) -> jax.Array:
  """mean ||v_theta(x_t, t) - u_t||^2 over batch and dims.

  Args:
    xt: [M, D]; t: [M]; target: [M, D] (treated as a constant).
  """
  pred = apply_fn(net_params, xt, t)
  return jnp.mean((pred - jax.lax.stop_gradient(target)) ** 2)


def simulate(apply_fn, net_params: PyTree, x_start: jax.Array, key: jax.Array,
             *, sigma: float, num_steps: int, sign: ArrayLike,
             base_drift: BaseDrift = None) -> jax.Array:
  """Euler-Maruyama with the learned drift, forward (sign=+1) or backward (-1).

  Both directions integrate s = 0 -> 1 with t = s (forward) or t = 1 - s
  (backward) and drift v_theta(x, t) + sign f(t, x), as the official sampler
  does for its reversed time grid.

  Args:
    x_start: [B, D] samples of p0 (forward) or p1 (backward).
    num_steps: number of EM steps (nfe).

  Returns:
    [num_steps + 1, B, D] path in FORWARD-time order (index 0 is t = 0).
  """
  sign = jnp.asarray(sign, x_start.dtype)
  s_grid = jnp.linspace(0.0, 1.0, num_steps + 1, dtype=x_start.dtype)

  def drift(s, x, _):
    t = jnp.where(sign > 0, s, 1.0 - s)
    # One t for the batch, shaped [1, ...] to broadcast: the field embeds it once.
    v = apply_fn(net_params, x, jnp.full((1,) * (x.ndim - 1), t))
    if base_drift is not None:
      v = v + sign * base_drift(t, x)
    return v

  path = sde.euler_maruyama(drift, sigma, x_start, s_grid, key)
  return jnp.where(sign > 0, path, path[::-1])


def knot_indices(num_sim_steps: int, num_knots: int) -> np.ndarray:
  """Grid indices of the mean-knot times linspace(0, 1, T) on an nfe grid."""
  return np.round(np.linspace(0, num_sim_steps, num_knots)).astype(np.int32)


# ----------------------------------------------------------------------------
# The alternating kernel
# ----------------------------------------------------------------------------


class FSBMState(NamedTuple):
  step: jax.Array         # [] int32, alternation index
  params: PyTree          # network params, leaves [2, ...]: 0 forward, 1 backward
  opt_state: PyTree       # AdamW state, leaves [2, ...]
  ema_params: PyTree      # EMA of params, leaves [2, ...]
  num_updates: jax.Array  # [2] int32 M-step updates of each network so far
  key: jax.Array          # typed PRNG key
  # The mean-field table of the reference drift; None (no leaf) without one, so every
  # task's state checkpoints (orbax cannot save a zero-size array).
  field: jax.Array | None


class FSBMSettings(NamedTuple):
  """Static settings of the alternating kernel."""

  dim: int
  csoc: CondSOCSettings
  match_steps: int          # M-step iterations per alternation
  match_batch: int          # M
  lr: float = 1e-3
  weight_decay: float = 0.0
  ema_decay: float = 0.999
  num_sim_steps: int = 1000  # Euler-Maruyama steps (nfe)
  hidden: int = 128
  t_eps: float = 1e-4        # M-step t ~ U(t_eps, 1 - t_eps)


class TaskTerms(NamedTuple):
  """What a task adds to the alternation (all optional)."""

  # f(t, x), or a MeanFieldDrift (its table lives in FSBMState.field).
  base_drift: BaseDrift | MeanFieldDrift = None
  # x [..., D] -> bool [...] obstacle test: each alternation reports the forward EMA
  # model's collision rate.
  collision_fn: Callable[[jax.Array], jax.Array] | None = None
  # A known state cost V(x) in every R-step (with tau = 0: the GSBM-style baseline).
  state_cost: StateCost = None
  # An interaction cost C(x, y) beside it, with the same per-pair weight (GSBM's
  # congestion; see ``Guidance``).
  interaction_cost: InteractionCost = None
  # The scale of the entropy cost beside it, with the same weight (GSBM's V-neck; see
  # ``Guidance``); 0 = off.
  entropy_scale: float = 0.0
  tau: float = 0.0            # feedback weight of a batch without "tau"
  state_weight: float = 1.0   # weight of state_cost for a batch without "state_weight"


class _Parts(NamedTuple):
  """The alternation's fixed pieces, built once by :func:`make_kernel`."""

  settings: FSBMSettings
  guide: Guidance              # keypoints and inv_std (drift and cost: see ``task``)
  task: TaskTerms
  net: models.VectorField
  tx: optax.GradientTransformation
  knot_idx: np.ndarray         # [T_mean] nfe-grid indices of the mean knots


def _stack2(tree):
  return jax.tree.map(lambda a, b: jnp.stack([a, b]), *tree)


def _take(tree, idx):
  return jax.tree.map(lambda a: a[idx], tree)


def _put(tree, idx, value):
  return jax.tree.map(lambda a, v: a.at[idx].set(v), tree, value)


def _is_mean_field(drift) -> bool:
  return drift is not None and hasattr(drift, "field_from")


def population_field(reference: MeanFieldDrift, path_params: gpath.PathParams,
                     x0: jax.Array, x1: jax.Array, key: jax.Array, *,
                     sigma: float) -> jax.Array:
  """The reference drift's table from one sample of each pair's Gaussian path.

  Args:
    reference: the mean-field drift.
    path_params: PathParams with a leading B axis; x0, x1: [B, D] endpoints.
    key: PRNG key (fresh noise per table time).

  Returns:
    ``reference.field_shape`` array, gradient-stopped.
  """
  def sample_at(s, i):
    noise = prng.normal(jax.random.fold_in(key, i), x0.shape, x0.dtype)
    return jax.vmap(lambda q, a, b, n: gpath.sample(q, a, b, sigma, s, n))(
        path_params, x0, x1, noise)

  return jax.lax.stop_gradient(reference.field_from(sample_at))


def reference_at(drift: BaseDrift | MeanFieldDrift, field: jax.Array | None) -> BaseDrift:
  """The reference drift f(t, x) given the current table."""
  if _is_mean_field(drift):
    return lambda t, x: drift.drift(t, x, field)
  return drift


def init_state(parts: _Parts, key: jax.Array) -> FSBMState:
  """Both networks, their AdamW states and EMAs, and the (zero) mean-field table."""
  dim, drift = parts.settings.dim, parts.task.base_drift
  k_fwd, k_bwd, key = jax.random.split(key, 3)
  x = jnp.zeros((1, dim), jnp.float32)
  t = jnp.zeros((1,), jnp.float32)
  params = _stack2([parts.net.init(k_fwd, x, t), parts.net.init(k_bwd, x, t)])
  opt_state = jax.vmap(parts.tx.init)(params)
  field = (jnp.zeros(tuple(drift.field_shape), jnp.float32) if _is_mean_field(drift)
           else None)
  return FSBMState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state,
                   ema_params=params, num_updates=jnp.zeros((2,), jnp.int32), key=key,
                   field=field)


def simulate_state(parts: _Parts, state: FSBMState, x_start: jax.Array, key: jax.Array,
                   sign: ArrayLike, use_ema: bool = True) -> jax.Array:
  """The direction ``sign``'s model simulated from x_start [n, D]: [nfe + 1, n, D]."""
  idx = jnp.where(jnp.asarray(sign) > 0, 0, 1)
  p = _take(state.ema_params if use_ema else state.params, idx)
  return simulate(parts.net.apply, p, x_start, key, sigma=parts.settings.csoc.sigma,
                  num_steps=parts.settings.num_sim_steps, sign=sign,
                  base_drift=reference_at(parts.task.base_drift, state.field))


class _Round(NamedTuple):
  """Which direction alternation k simulates, fits and trains."""

  first: jax.Array        # [] bool, round 0
  sim_sign: jax.Array     # [] +1 simulate forward from x0 (k odd), -1 backward (k even)
  fit_sign: jax.Array     # [] the CondSOC anchoring (+1 at round 0)
  train_idx: jax.Array    # [] int, the trained network: 0 forward, 1 backward
  train_sign: jax.Array   # [] its sign


def round_of(k: jax.Array) -> _Round:
  """Round k >= 1 simulates direction fwd (k odd) or bwd (k even) and trains the
  opposite network; round 0 fits forward and trains forward."""
  first = k == 0
  sim_sign = jnp.where(k % 2 == 1, 1.0, -1.0)
  fit_sign = jnp.where(first, 1.0, sim_sign)
  train_idx = jnp.where(first | (k % 2 == 0), 0, 1)
  train_sign = jnp.where(train_idx == 0, 1.0, -1.0)
  return _Round(first, sim_sign, fit_sign, train_idx, train_sign)


def initial_mean_path(parts: _Parts, state: FSBMState, x0: jax.Array, x1: jax.Array,
                      rnd: _Round, key: jax.Array) -> jax.Array:
  """[B, T_mean, D] mean knots: straight lines at round 0, else the simulated EMA
  model's path at the knot times."""
  def from_model(_):
    x_start = jnp.where(rnd.sim_sign > 0, x0, x1)
    path = simulate_state(parts, state, x_start, key, rnd.sim_sign)   # [nfe+1, B, D]
    return jnp.swapaxes(path[parts.knot_idx], 0, 1)                  # [B, T, D]

  def straight(_):
    return jax.vmap(lambda a, b: gpath.linear_mean_path(
        a, b, parts.settings.csoc.num_mean_knots))(x0, x1)

  return jax.lax.cond(rnd.first, straight, from_model, None)


def initial_field(parts: _Parts, state: FSBMState, mean_path: jax.Array, first: jax.Array,
                  key: jax.Array) -> jax.Array | None:
  """The table the R-step uses: built from the straight-line paths at round 0."""
  drift, csoc = parts.task.base_drift, parts.settings.csoc
  if not _is_mean_field(drift):
    return state.field

  def from_paths(_):
    params0 = jax.vmap(lambda p: gpath.init_params(p, csoc.num_gamma_knots))(mean_path)
    return population_field(drift, params0, mean_path[:, 0], mean_path[:, -1], key,
                            sigma=csoc.sigma).astype(state.field.dtype)

  return jax.lax.cond(first, from_paths, lambda _: state.field, None)


class _Fitted(NamedTuple):
  """The R-step's Gaussian paths, the M-step's regression data."""

  path_params: gpath.PathParams   # leading [B] axis
  x0: jax.Array                   # [B, D] the paths' endpoints
  x1: jax.Array                   # [B, D]
  sign: jax.Array                 # [] the trained direction's sign
  base_drift: BaseDrift           # the reference drift the targets remove


def match_loss_inputs(fitted: _Fitted, key: jax.Array, settings: FSBMSettings):
  """(x_t [M, D], t [M], target drift [M, D]) of M pairs drawn from the fitted paths."""
  k_idx, k_t, k_n = jax.random.split(key, 3)
  dtype, num_pairs = fitted.x0.dtype, fitted.x0.shape[0]
  idx = prng.randint(k_idx, (settings.match_batch,), 0, num_pairs)
  t = prng.uniform(k_t, (settings.match_batch,), dtype, settings.t_eps, 1.0 - settings.t_eps)
  noise = prng.normal(k_n, (settings.match_batch, settings.dim), dtype)
  pp = _take(fitted.path_params, idx)
  xt, target = jax.vmap(lambda q, a, b, tt, n: path_drift_at(
      q, a, b, tt, n, sigma=settings.csoc.sigma, sign=fitted.sign,
      base_drift=fitted.base_drift))(pp, fitted.x0[idx], fitted.x1[idx], t, noise)
  return xt, t, target


def match_step(parts: _Parts, fitted: _Fitted, count0: jax.Array, carry, inputs):
  """One M-step: AdamW on the bridge-matching loss, then the warmed-up EMA."""
  p, s, e = carry
  step_key, i = inputs
  xt, t, target = match_loss_inputs(fitted, step_key, parts.settings)
  update = blocks.gradient_step(bridge_matching_loss, parts.tx)(
      p, s, parts.net.apply, xt, t, target)
  # EMA warm-up min(decay, (1 + n) / (10 + n)): at the official scale (4000 steps per
  # alternation) it is the plain 0.999 EMA, but at reduced scale a cold EMA would still
  # weigh the random init by 0.999^steps.
  n = (count0 + i).astype(jnp.float32)
  decay = jnp.minimum(parts.settings.ema_decay, (1.0 + n) / (10.0 + n))
  e = blocks.ema_update(e, update.params, decay)
  return (update.params, update.opt_state, e), {"loss": update.loss}


def _tail_mean(metrics):
  """The M-step loss: a mean over the last tenth of the alternation's steps."""
  losses = metrics["loss"]
  return {"loss": jnp.mean(losses[-max(1, losses.shape[0] // 10):])}


def m_step(parts: _Parts, state: FSBMState, rnd: _Round, fitted: _Fitted, key: jax.Array):
  """``match_steps`` M-steps of the trained direction's network (one scan):
  (params, opt state, ema of that network, M-step loss [])."""
  steps = parts.settings.match_steps
  carry = (_take(state.params, rnd.train_idx), _take(state.opt_state, rnd.train_idx),
           _take(state.ema_params, rnd.train_idx))
  step = functools.partial(match_step, parts, fitted, state.num_updates[rnd.train_idx])
  scan = blocks.scan_steps(step, steps, batch_axis=0, metrics=_tail_mean)
  (params, opt_state, ema), metrics = scan(
      carry, (jax.random.split(key, steps), jnp.arange(steps)))
  return params, opt_state, ema, metrics["loss"]


def _pair_weights(task: TaskTerms, batch, x0: jax.Array) -> tuple[jax.Array, jax.Array]:
  """([B] tau, [B] state-cost weight) of the batch, or the task's defaults."""
  tau = batch.get("tau", jnp.full(x0.shape[:1], task.tau, x0.dtype))
  chex.assert_shape(tau, x0.shape[:1])
  weight = batch.get("state_weight", jnp.full(x0.shape[:1], task.state_weight, x0.dtype))
  chex.assert_shape(weight, x0.shape[:1])
  return tau, weight


def alternation(parts: _Parts, state: FSBMState, batch):
  """One alternation (R-step then M-step): ``train_step(state, batch)``."""
  x0, x1 = batch["x0"], batch["x1"]
  chex.assert_rank([x0, x1], 2)
  chex.assert_equal_shape([x0, x1])
  tau, weight = _pair_weights(parts.task, batch, x0)
  csoc, drift = parts.settings.csoc, parts.task.base_drift
  key, k_sim, k_csoc, k_match, k_eval = jax.random.split(state.key, 5)
  # A separate stream for the mean-field tables, so tasks without one keep
  # exactly the random numbers they had before mean-field drifts existed.
  k_field_in, k_field_out = jax.random.split(jax.random.fold_in(state.key, 2**20))
  rnd = round_of(state.step)
  mean_path = initial_mean_path(parts, state, x0, x1, rnd, k_sim)
  px0, px1 = mean_path[:, 0], mean_path[:, -1]
  field_in = initial_field(parts, state, mean_path, rnd.first, k_field_in)
  path_params, csoc_losses, csoc_rejected = condsoc_solve(
      px0, px1, mean_path, k_csoc, settings=csoc,
      guide=parts.guide._replace(base_drift=reference_at(drift, field_in),
                                 state_cost=parts.task.state_cost,
                                 interaction_cost=parts.task.interaction_cost,
                                 entropy_scale=parts.task.entropy_scale),
      weights=PairWeights(rnd.fit_sign, tau, weight), with_stats=True)
  field_out = state.field
  if _is_mean_field(drift):
    field_out = population_field(drift, path_params, px0, px1, k_field_out,
                                 sigma=csoc.sigma).astype(state.field.dtype)
  fitted = _Fitted(path_params, px0, px1, rnd.train_sign, reference_at(drift, field_out))
  params, opt_state, ema, match_loss = m_step(parts, state, rnd, fitted, k_match)
  new_state = FSBMState(
      step=state.step + 1, params=_put(state.params, rnd.train_idx, params),
      opt_state=_put(state.opt_state, rnd.train_idx, opt_state),
      ema_params=_put(state.ema_params, rnd.train_idx, ema),
      num_updates=state.num_updates.at[rnd.train_idx].add(parts.settings.match_steps),
      key=key, field=field_out)
  metrics = {
      "loss": match_loss,
      "csoc_loss_first": csoc_losses[0],
      "csoc_loss_last": csoc_losses[-1],
      # Pair-steps the CondSOC safeguard rejected in this R-step (0: plain SGD).
      "csoc_rejected": jnp.sum(csoc_rejected).astype(jnp.float32),
      "train_direction": rnd.train_idx.astype(jnp.float32),
  }
  if parts.task.collision_fn is not None:
    path = simulate_state(parts, new_state, x0, k_eval, 1.0)
    metrics["collision_rate"] = jnp.mean(
        jnp.any(parts.task.collision_fn(path), axis=0).astype(jnp.float32))
  return new_state, metrics


def make_kernel(settings: FSBMSettings, keypoints: ArrayLike,
                task: TaskTerms = TaskTerms()) -> contract.TrainKernel:
  """Builds the FSBM alternating kernel.

  Args:
    settings: static settings.
    keypoints: [K, S, D] aligned trajectories on the CondSOC grid.
    task: the task's reference drift, obstacle test, known state cost and the default
      tau and state-cost weight (:class:`TaskTerms`).

  Returns:
    A :class:`~jaxlib_papers.core.contract.TrainKernel`: ``train_step(state, batch)``
    runs one alternation on batch = {"x0": [B, D], "x1": [B, D]} samples of the two
    marginals and optionally "tau": [B] per-pair feedback weights and "state_weight": [B]
    per-pair weights of ``state_cost`` (traced, so FSBM, its tau = 0 baseline and the
    GSBM-style baseline share one compiled program; the loop shards them with the
    pairs). Extra: ``simulate(state, x_start [n, D], key, sign, use_ema=True) ->
    [nfe + 1, n, D]`` (forward-time order).
  """
  if task.tau < 0:
    raise ValueError(f"tau must be >= 0, got {task.tau}")
  if task.state_weight < 0:
    raise ValueError(f"state_weight must be >= 0, got {task.state_weight}")
  kp = feedback.check_keypoints(keypoints, settings.csoc.num_steps)
  if kp.shape[2] != settings.dim:
    raise ValueError(f"keypoints have dim {kp.shape[2]}, config dim is {settings.dim}")
  keypoints_arr = jnp.asarray(kp)
  parts = _Parts(
      settings=settings,
      guide=Guidance(keypoints_arr, feedback.keypoint_inv_std(keypoints_arr)),
      task=task, net=models.VectorField(dim=settings.dim, hidden=settings.hidden),
      tx=optax.adamw(settings.lr, weight_decay=settings.weight_decay, eps=1e-8),
      knot_idx=knot_indices(settings.num_sim_steps, settings.csoc.num_mean_knots))
  return contract.train_kernel(functools.partial(init_state, parts),
                               functools.partial(alternation, parts),
                               simulate=functools.partial(simulate_state, parts))
