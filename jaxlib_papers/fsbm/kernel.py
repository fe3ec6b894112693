"""FSBM kernels: CondSOC (R-step), bridge matching (M-step), sampling, alternation.

Every function is pure and jit-free; `core.train_loop` (or a test) jits them.
Shapes: B endpoint pairs, D state dims, N noise draws per pair, S CondSOC grid
points, T = T_mean mean knots, M the M-step batch.

One alternation (``train_step``) is one compiled program:
  1. endpoint pairs: round 0 uses independent (x0, x1) with straight-line mean
     knots; round k >= 1 simulates the EMA model of the other direction
     (k odd: forward from x0, k even: backward from x1) and takes its path at
     the T_mean knot times;
  2. R-step: the CondSOC solve over all B pairs at once (vmap over pairs,
     lax.scan over SGD iterations), anchored at the simulated direction;
  3. M-step: a lax.scan of AdamW + EMA steps regressing the trained
     direction's network (round 0 and even rounds: forward, odd: backward) on
     the fitted paths' drifts.
tau is data of the batch (``batch["tau"]``, one weight per pair), so tau = 0
(the unguided DSBM-like baseline) runs through the very same compiled program.

Reference drifts. ``base_drift`` is None, a plain f(t, x), or a mean-field
drift (an object with ``drift(t, x, field)``, ``field_from(sample_at)`` and
``field_shape``, e.g. ``opinion.PolarizeDrift``) whose value depends on the
population through a table ``field`` kept in the kernel state. The table is
built from the population of Gaussian paths: at round 0 from the initial
straight-line paths, and after every R-step from the freshly fitted paths; the
R-step uses the table it starts with, the M-step targets and all later
simulations use the refreshed one (the order of the official code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxlib_papers.core import contract, prng, sde
from jaxlib_papers.fsbm import feedback, gpath, models

PyTree = Any
# f(t [S] or [], x [..., D]) -> [..., D]: the reference (base) drift; None = 0.
BaseDrift = Callable[[jax.Array, jax.Array], jax.Array] | None
# V(x [..., D]) -> [...]: a known state cost added to the CondSOC objective.
StateCost = Callable[[jax.Array], jax.Array] | None


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


def time_grid(settings: CondSOCSettings, dtype=jnp.float32) -> jax.Array:
  """[S] CondSOC time grid linspace(eps, 1 - eps, S)."""
  return jnp.linspace(settings.eps, 1.0 - settings.eps, settings.num_steps,
                      dtype=dtype)


def condsoc_pair_loss(params: gpath.PathParams, x0: jax.Array, x1: jax.Array,
                      noise: jax.Array, *, sigma: float, t: jax.Array,
                      sign: ArrayLike, tau: ArrayLike, keypoints: jax.Array,
                      inv_std: jax.Array, base_drift: BaseDrift = None,
                      state_cost: StateCost = None, state_weight: ArrayLike = 1.0,
                      with_feedback: bool = True, with_state: bool = True):
  """CondSOC objective of one pair, a mean over its N paths and S times.

  L = mean_{n,t} [ ||u_t||^2 / (2 sigma^2) + tau |<grad G, u_t>| + tau sum_d (H 1)_d
                   + w V(X_t) ]
  with u_t the path drift minus the signed base drift and w V an optional known
  state cost (the GSBM-style baseline; None = 0, as in FSBM).

  Args:
    params: the pair's spline parameters.
    x0, x1: [D] endpoints.
    noise: [N, S, D] standard normals.
    sigma: diffusion coefficient.
    t: [S] time grid (must match the keypoint grid).
    sign: +1.0 forward / -1.0 backward (traced is fine).
    tau: feedback weight (traced is fine; 0 gives the unguided objective).
    keypoints: [K, S, D] aligned trajectories.
    inv_std: [S, D] from ``feedback.keypoint_inv_std``.
    base_drift: optional reference drift f(t, x).
    state_cost: optional V(x [..., D]) -> [...].
    state_weight: w, the weight of V (traced is fine; 0 gives FSBM's objective).
    with_feedback: False leaves the two feedback terms out (static): the objective of
      tau = 0 without computing terms that tau multiplies by zero.
    with_state: False leaves ``state_cost`` out (static): the objective of
      ``state_weight`` = 0 without evaluating V (and its gradient) only to multiply it by 0.

  Returns:
    (loss [], aux dict of [] scalars: control, feedback, divergence, state).
  """
  x, u = gpath.sample_and_drift(params, x0, x1, sigma, t, noise, sign)
  if base_drift is not None:
    u = u - sign * base_drift(t[None, :], x)
  control = jnp.sum(u**2, axis=-1) / (2.0 * sigma**2)                  # [N, S]
  state = (jnp.zeros_like(control) if state_cost is None or not with_state
           else state_weight * state_cost(x))
  if not with_feedback:
    zero = jnp.zeros((), control.dtype)
    loss = jnp.mean(control + state)
    return loss, dict(control=jnp.mean(control), feedback=zero, divergence=zero,
                      state=jnp.mean(state))
  ref_index = jnp.where(jnp.asarray(sign) > 0, 0, t.shape[0] - 1)
  _, grad_g, hess_ones = jax.vmap(
      lambda xn: feedback.feedback_terms(xn, keypoints, inv_std, ref_index))(x)
  guide = jnp.abs(jnp.sum(grad_g * u, axis=-1))                       # [N, S]
  divergence = jnp.sum(hess_ones, axis=-1)                            # [N, S]
  loss = jnp.mean(control + tau * guide + tau * divergence + state)
  aux = dict(control=jnp.mean(control), feedback=jnp.mean(guide),
             divergence=jnp.mean(divergence), state=jnp.mean(state))
  return loss, aux


def condsoc_optimizer(settings: CondSOCSettings) -> optax.GradientTransformation:
  """SGD with separate learning rates for the mean and std knots."""
  return optax.multi_transform(
      {"mean": optax.sgd(settings.lr_mean, momentum=settings.momentum or None),
       "gamma": optax.sgd(settings.lr_gamma, momentum=settings.momentum or None)},
      gpath.PathParams(mean_knots="mean", gamma_knots="gamma"))


def condsoc_solve(x0: jax.Array, x1: jax.Array, mean_path: jax.Array,
                  key: jax.Array, *, settings: CondSOCSettings,
                  sign: ArrayLike, tau: ArrayLike, keypoints: jax.Array,
                  inv_std: jax.Array, base_drift: BaseDrift = None,
                  state_cost: StateCost = None, state_weight: ArrayLike = 1.0,
                  with_stats: bool = False):
  """Fits one Gaussian path per endpoint pair: one program for all B pairs.

  The per-pair losses are summed and divided by ``settings.micro_batch``, so
  each pair's gradient (and hence its SGD step) is exactly what the official
  code gives with micro-batches of mB pairs, independently of B and of how the
  pairs are sharded. Noise at iteration i is one [B, N, S, D] draw from
  fold_in(key, i); with JAX's partitionable threefry (the default) each device
  draws its own slice and the values do not depend on the sharding.

  Safeguard (``settings.safe_ratio`` > 0, ours): plain SGD at the official rate
  diverges for a pair whose objective is too curved for it (the step overshoots
  and the error grows by a constant factor each iteration until the loss is
  NaN; seen on V-neck pairs through the neck when the keypoints' spread there is
  small). Each pair keeps the iterate with its lowest loss so far (with that
  loss and gradient); when its loss at a new iterate is not finite or exceeds
  ``safe_ratio`` times the lowest one, the step is rejected: the pair goes back
  to its best iterate and retakes that gradient with half its previous step (the
  step scale stays halved from then on). A slow divergence is caught too, since
  the loss is compared with the best, not the last, value. A pair that is never
  rejected follows the official SGD exactly.

  Args:
    x0, x1: [B, D] endpoints.
    mean_path: [B, T_mean, D] initial mean knots (endpoints must equal x0/x1).
    key: PRNG key.
    settings: CondSOC settings.
    sign: +1.0 forward / -1.0 backward anchoring.
    tau: feedback weight, [] or [B] (one per pair).
    keypoints: [K, S, D]; inv_std: [S, D].
    base_drift: optional reference drift.
    state_cost: optional known state cost V (GSBM-style baseline).
    state_weight: its weight, [] or [B] (one per pair, like tau).
    with_stats: also return the number of rejected pair-steps per iteration.

  Returns:
    (params: PathParams with leading B axis, losses: [num_iters] mean per-pair
    loss at each iteration, before its update) and, with ``with_stats``,
    rejected: [num_iters] int32 pairs whose step was rejected at that iteration.
    The returned params are the step taken at the last iteration, from the
    pair's new iterate if accepted, else from its best one.
  """
  chex.assert_rank([x0, x1, mean_path], [2, 2, 3])
  num_pairs, dim = x0.shape
  chex.assert_shape(mean_path, (num_pairs, settings.num_mean_knots, dim))
  t = time_grid(settings, x0.dtype)
  params = jax.vmap(lambda p: gpath.init_params(p, settings.num_gamma_knots))(
      mean_path)
  tx = condsoc_optimizer(settings)
  opt_state = tx.init(params)
  noise_shape = (num_pairs, settings.num_noise, settings.num_steps, dim)
  safe = settings.safe_ratio > 0
  tau = jnp.broadcast_to(jnp.asarray(tau, x0.dtype), (num_pairs,))
  state_weight = jnp.broadcast_to(jnp.asarray(state_weight, x0.dtype), (num_pairs,))

  def noise_at(it):
    return prng.normal(jax.random.fold_in(key, it), noise_shape, x0.dtype)

  def objective(p, noise, with_feedback, with_state):
    losses, _ = jax.vmap(
        lambda pp, a, b, n, w, v: condsoc_pair_loss(
            pp, a, b, n, sigma=settings.sigma, t=t, sign=sign, tau=w,
            keypoints=keypoints, inv_std=inv_std, base_drift=base_drift,
            state_cost=state_cost, state_weight=v, with_feedback=with_feedback,
            with_state=with_state))(
                p, x0, x1, noise, tau, state_weight)
    return jnp.sum(losses) / settings.micro_batch, losses

  def per_pair(mask, a, b):
    """a where mask (one flag per pair, leading axis) else b."""
    return jax.tree.map(
        lambda u, v: jnp.where(mask.reshape((-1,) + (1,) * (u.ndim - 1)), u, v), a, b)

  def step(carry, it, with_feedback, with_state):
    # Iteration it's noise arrives in the carry and the next one's is drawn here: drawn
    # inside the differentiated objective, XLA fuses the random-bit generation into each of
    # its consumers and recomputes it. The draws are the same: fold_in(key, it).
    p, s, last, noise = carry
    next_noise = noise_at(it + 1)
    grads, losses = jax.grad(objective, has_aux=True)(p, noise, with_feedback, with_state)
    grads = gpath.pin_std_ends(grads)
    if not safe:
      updates, s = tx.update(grads, s, p)
      return (optax.apply_updates(p, updates), s, last, next_noise), (
          jnp.mean(losses), jnp.zeros((), jnp.int32))
    p_best, g_best, loss_best, scale = last
    finite = jnp.isfinite(losses) & jax.vmap(
        lambda g: jnp.all(jnp.stack([jnp.all(jnp.isfinite(v))
                                     for v in jax.tree.leaves(g)])))(grads)
    accept = finite & (losses <= settings.safe_ratio * loss_best)
    improved = accept & (losses < loss_best)
    scale = jnp.where(accept, scale, 0.5 * scale)
    base = per_pair(accept, p, p_best)
    grad = per_pair(accept, grads, g_best)
    scaled = jax.tree.map(lambda g: g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), grad)
    updates, s = tx.update(scaled, s, base)
    last = (per_pair(improved, p, p_best), per_pair(improved, grads, g_best),
            jnp.where(improved, losses, loss_best), scale)
    # The reported mean is over the losses at the iterates stepped from (a
    # rejected loss may be Inf): the new loss if accepted, the best one if not.
    return (optax.apply_updates(base, updates), s, last, next_noise), (
        jnp.mean(jnp.where(accept, losses, loss_best)), jnp.sum(~accept).astype(jnp.int32))

  last = (params, jax.tree.map(jnp.zeros_like, params),
          jnp.full((num_pairs,), jnp.inf, x0.dtype), jnp.ones((num_pairs,), x0.dtype))

  def solve(with_feedback, with_state):
    return lambda: jax.lax.scan(lambda c, it: step(c, it, with_feedback, with_state),
                                (params, opt_state, last, noise_at(0)),
                                jnp.arange(settings.num_iters))

  # When every pair has tau = 0 (the unguided and GSBM-style baselines) the feedback terms
  # are multiplied by zero, and when every pair has state_weight = 0 (FSBM and tau = 0)
  # so is the known state cost: a branch per combination leaves out what is multiplied by
  # zero (the feedback terms are ~50% of an iteration, the S-tunnel obstacle cost ~30%),
  # and one compiled program still serves every tau and weight. (The branch is taken around
  # the whole scan, so each iteration compiles exactly as it would without the branch.)
  with_feedback = jnp.any(tau != 0)
  if state_cost is None:
    (params, _, _, _), (losses, rejected) = jax.lax.cond(
        with_feedback, solve(True, False), solve(False, False))
  else:
    index = 2 * with_feedback.astype(jnp.int32) + jnp.any(state_weight != 0).astype(jnp.int32)
    (params, _, _, _), (losses, rejected) = jax.lax.switch(
        index, [solve(False, False), solve(False, True), solve(True, False),
                solve(True, True)])
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
    v = apply_fn(net_params, x, jnp.full(x.shape[:-1], t))
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
  field: jax.Array        # mean-field table of the reference drift ([0] if none)


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


def _stack2(tree):
  return jax.tree.map(lambda a, b: jnp.stack([a, b]), *tree)


def _take(tree, idx):
  return jax.tree.map(lambda a: a[idx], tree)


def _put(tree, idx, value):
  return jax.tree.map(lambda a, v: a.at[idx].set(v), tree, value)


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


def make_kernel(settings: FSBMSettings, keypoints: ArrayLike, *, tau: float,
                base_drift: BaseDrift | MeanFieldDrift = None,
                collision_fn: Callable[[jax.Array], jax.Array] | None = None,
                state_cost: StateCost = None,
                state_weight: float = 1.0) -> contract.TrainKernel:
  """Builds the FSBM alternating kernel.

  Args:
    settings: static settings.
    keypoints: [K, S, D] aligned trajectories on the CondSOC grid.
    tau: default feedback weight, used for a batch without ``"tau"``.
    base_drift: optional reference drift: f(t, x), or a :class:`MeanFieldDrift`
      (its table lives in ``FSBMState.field``).
    collision_fn: optional ``x [..., D] -> bool [...]`` obstacle test; when
      given, each alternation reports the forward EMA model's collision rate.
    state_cost: optional known state cost V(x) in every R-step (with tau = 0
      this is the GSBM-style baseline that is told where the obstacles are).
    state_weight: default weight of ``state_cost``, used for a batch without
      ``"state_weight"``.

  Returns:
    A :class:`~jaxlib_papers.core.contract.TrainKernel`: ``train_step(state, batch)``
    runs one alternation on batch = {"x0": [B, D], "x1": [B, D]} samples of the two
    marginals and optionally "tau": [B] per-pair feedback weights and "state_weight": [B]
    per-pair weights of ``state_cost`` (traced, so FSBM, its tau = 0 baseline and the
    GSBM-style baseline share one compiled program; the loop shards them with the
    pairs). Extras:
    ``simulate(state, x_start [n, D], key, sign, use_ema=True) -> [nfe + 1, n, D]``
    (forward-time order), ``apply_fn`` (the flax network's apply) and ``settings``.
  """
  if tau < 0:
    raise ValueError(f"tau must be >= 0, got {tau}")
  if state_weight < 0:
    raise ValueError(f"state_weight must be >= 0, got {state_weight}")
  kp = feedback.check_keypoints(keypoints, settings.csoc.num_steps)
  if kp.shape[2] != settings.dim:
    raise ValueError(f"keypoints have dim {kp.shape[2]}, config dim is {settings.dim}")
  keypoints_arr = jnp.asarray(kp)
  inv_std = feedback.keypoint_inv_std(keypoints_arr)
  net = models.VectorField(dim=settings.dim, hidden=settings.hidden)
  apply_fn = net.apply
  tx = optax.adamw(settings.lr, weight_decay=settings.weight_decay, eps=1e-8)
  csoc = settings.csoc
  knot_idx = knot_indices(settings.num_sim_steps, csoc.num_mean_knots)
  mean_field = base_drift is not None and hasattr(base_drift, "field_from")
  field_shape = tuple(base_drift.field_shape) if mean_field else (0,)

  def reference(field):
    """The reference drift f(t, x) given the current table."""
    if mean_field:
      return lambda t, x: base_drift.drift(t, x, field)
    return base_drift

  def init(key):
    k_fwd, k_bwd, key = jax.random.split(key, 3)
    x = jnp.zeros((1, settings.dim), jnp.float32)
    t = jnp.zeros((1,), jnp.float32)
    params = _stack2([net.init(k_fwd, x, t), net.init(k_bwd, x, t)])
    opt_state = jax.vmap(tx.init)(params)
    return FSBMState(step=jnp.zeros((), jnp.int32), params=params,
                     opt_state=opt_state, ema_params=params,
                     num_updates=jnp.zeros((2,), jnp.int32), key=key,
                     field=jnp.zeros(field_shape, jnp.float32))

  def sim(state, x_start, key, sign, use_ema=True):
    idx = jnp.where(jnp.asarray(sign) > 0, 0, 1)
    p = _take(state.ema_params if use_ema else state.params, idx)
    return simulate(apply_fn, p, x_start, key, sigma=csoc.sigma,
                    num_steps=settings.num_sim_steps, sign=sign,
                    base_drift=reference(state.field))

  def train_step(state: FSBMState, batch):
    x0, x1 = batch["x0"], batch["x1"]
    chex.assert_rank([x0, x1], 2)
    chex.assert_equal_shape([x0, x1])
    tau_value = batch.get("tau", jnp.full(x0.shape[:1], tau, x0.dtype))
    chex.assert_shape(tau_value, x0.shape[:1])
    weight_value = batch.get("state_weight", jnp.full(x0.shape[:1], state_weight, x0.dtype))
    chex.assert_shape(weight_value, x0.shape[:1])
    k = state.step
    key, k_sim, k_csoc, k_match, k_eval = jax.random.split(state.key, 5)
    # A separate stream for the mean-field tables, so tasks without one keep
    # exactly the random numbers they had before mean-field drifts existed.
    k_field = jax.random.fold_in(state.key, 2**20)
    first = k == 0
    # Round k >= 1 simulates direction fwd (k odd) or bwd (k even) and trains
    # the opposite network; round 0 fits forward and trains forward.
    sim_sign = jnp.where(k % 2 == 1, 1.0, -1.0)
    fit_sign = jnp.where(first, 1.0, sim_sign)
    train_idx = jnp.where(first | (k % 2 == 0), 0, 1)
    train_sign = jnp.where(train_idx == 0, 1.0, -1.0)

    def from_model(_):
      x_start = jnp.where(sim_sign > 0, x0, x1)
      path = sim(state, x_start, k_sim, sim_sign)          # [nfe+1, B, D]
      return jnp.swapaxes(path[knot_idx], 0, 1)           # [B, T, D]

    def straight(_):
      return jax.vmap(lambda a, b: gpath.linear_mean_path(
          a, b, csoc.num_mean_knots))(x0, x1)

    mean_path = jax.lax.cond(first, straight, from_model, None)
    px0, px1 = mean_path[:, 0], mean_path[:, -1]
    field_in, field_out = state.field, state.field
    k_field_in, k_field_out = jax.random.split(k_field)
    if mean_field:
      def initial_field(_):
        params0 = jax.vmap(lambda p: gpath.init_params(p, csoc.num_gamma_knots))(
            mean_path)
        return population_field(base_drift, params0, px0, px1, k_field_in,
                                sigma=csoc.sigma).astype(state.field.dtype)

      field_in = jax.lax.cond(first, initial_field, lambda _: state.field, None)
    path_params, csoc_losses, csoc_rejected = condsoc_solve(
        px0, px1, mean_path, k_csoc, settings=csoc, sign=fit_sign,
        tau=tau_value, keypoints=keypoints_arr, inv_std=inv_std,
        base_drift=reference(field_in), state_cost=state_cost, state_weight=weight_value,
        with_stats=True)
    if mean_field:
      field_out = population_field(base_drift, path_params, px0, px1, k_field_out,
                                   sigma=csoc.sigma).astype(state.field.dtype)
    m_drift = reference(field_out)

    # ---- M-step on the trained direction's network.
    num_pairs = x0.shape[0]
    params = _take(state.params, train_idx)
    opt_state = _take(state.opt_state, train_idx)
    ema = _take(state.ema_params, train_idx)

    count0 = state.num_updates[train_idx]

    def match_step(carry, inputs):
      p, s, e = carry
      step_key, i = inputs
      k_idx, k_t, k_n = jax.random.split(step_key, 3)
      idx = prng.randint(k_idx, (settings.match_batch,), 0, num_pairs)
      t = prng.uniform(k_t, (settings.match_batch,), x0.dtype,
                             settings.t_eps, 1.0 - settings.t_eps)
      noise = prng.normal(k_n, (settings.match_batch, settings.dim),
                                x0.dtype)
      pp = _take(path_params, idx)
      xt, target = jax.vmap(lambda q, a, b, tt, n: path_drift_at(
          q, a, b, tt, n, sigma=csoc.sigma, sign=train_sign,
          base_drift=m_drift))(pp, px0[idx], px1[idx], t, noise)
      loss, grads = jax.value_and_grad(bridge_matching_loss)(
          p, apply_fn, xt, t, target)
      updates, s = tx.update(grads, s, p)
      p = optax.apply_updates(p, updates)
      # EMA warm-up min(decay, (1 + n) / (10 + n)): at the official scale
      # (4000 steps per alternation) it is the plain 0.999 EMA, but at reduced
      # scale a cold EMA would still weigh the random init by 0.999^steps.
      n = (count0 + i).astype(jnp.float32)
      decay = jnp.minimum(settings.ema_decay, (1.0 + n) / (10.0 + n))
      e = optax.incremental_update(p, e, 1.0 - decay)
      return (p, s, e), loss

    (params, opt_state, ema), match_losses = jax.lax.scan(
        match_step, (params, opt_state, ema),
        (jax.random.split(k_match, settings.match_steps),
         jnp.arange(settings.match_steps)))
    new_state = FSBMState(
        step=k + 1,
        params=_put(state.params, train_idx, params),
        opt_state=_put(state.opt_state, train_idx, opt_state),
        ema_params=_put(state.ema_params, train_idx, ema),
        num_updates=state.num_updates.at[train_idx].add(settings.match_steps),
        key=key, field=field_out)
    metrics = {
        "loss": jnp.mean(match_losses[-max(1, settings.match_steps // 10):]),
        "csoc_loss_first": csoc_losses[0],
        "csoc_loss_last": csoc_losses[-1],
        # Pair-steps the CondSOC safeguard rejected in this R-step (0: plain SGD).
        "csoc_rejected": jnp.sum(csoc_rejected).astype(jnp.float32),
        "train_direction": train_idx.astype(jnp.float32),
    }
    if collision_fn is not None:
      path = sim(new_state, x0, k_eval, 1.0)
      metrics["collision_rate"] = jnp.mean(
          jnp.any(collision_fn(path), axis=0).astype(jnp.float32))
    return new_state, metrics

  return contract.train_kernel(init, train_step, simulate=sim, apply_fn=apply_fn,
                               settings=settings)
