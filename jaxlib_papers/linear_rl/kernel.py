"""Null-space randomized LSVI and baselines as pure, fixed-shape functions.

Wu, Sekhari, Krishnamurthy, Sun (ICLR 2025), "Computationally efficient RL
under linear Bellman completeness for deterministic dynamics".

Per step ``h`` the agent keeps (fixed shapes, zero-padded to ``T`` episodes):
the features ``phi_{i,h}``, next states ``s_{i,h+1}`` (so regression targets
``V_bar_{h+1}(s_{i,h+1})`` are recomputed every episode from the current
sampled value function), rewards, the Gram matrix ``X^T X``, ``X^T r``, and an
orthonormal basis of the span of the features built incrementally by
Gram-Schmidt from ``X`` itself (never from ``X^T X``: the span decision must
not see squared condition numbers).

Planning for null-space randomized LSVI, ``h = H..1``:
  ``theta_hat``  min-norm least squares of ``V_bar_{h+1}(s')`` on ``phi``,
  ``xi``         ``sigma_h Q L^{-T} z`` with ``Q = I - P``, ``L L^T = Q Lambda_0 Q
                 + P`` (covariance ``sigma_h^2 Q Lambda^{-1} Q``: noise only in
                 the null space of the data),
  ``omega_bar``  ridge estimate of the reward weights plus
                 ``N(0, sigma_R^2 Sigma^{-1})``,
  ``Q_bar_h = <omega_bar + theta_hat + xi, phi>``; no clipping.
The agent acts greedily (random tie-breaking). The agents are module-level pure
functions (:func:`plan`, :func:`act`, :func:`learn`) bound by :func:`make_agent` into the
core episodic contract (``core.contract.Agent`` / ``Episodic``); a run of ``T`` episodes is
``contract.run_episodes``, one ``lax.scan`` (:func:`run_episodes` draws the seed's
environment first); ``train.simulate`` vmaps and jits it over seeds.

Baselines in the same framework: LSVI-UCB (ridge LS of ``r + V_{h+1}`` plus
``beta ||phi||_{Lambda^{-1}}``, capped at the remaining horizon), RLSVI
(Gaussian posterior sample of each ``theta_h``) and epsilon-greedy LSVI.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from jaxlib_papers.core import contract, precision, prng
from jaxlib_papers.linear_rl import envs as envs_lib

Array = jax.Array

AGENTS = ("nullspace", "lsvi_ucb", "rlsvi", "eps_greedy")


class AgentConfig(NamedTuple):
  """Static hyperparameters of an agent.

  Attributes:
    name: one of ``AGENTS``.
    sigma_theta: null-space noise scale ``sigma_h`` (all ``h``).
    sigma_reward: reward-noise scale ``sigma_R``.
    ridge: ridge ``lambda`` of ``Sigma = lambda I + X^T X`` (rewards for
      nullspace; the whole regression for the baselines).
    beta: LSVI-UCB bonus scale (may be a traced scalar: one program for several).
    epsilon: epsilon-greedy exploration probability.
    rlsvi_noise: RLSVI likelihood noise std ``sigma``.
    rlsvi_prior: RLSVI prior precision ``lambda`` (prior ``N(0, I/lambda)``).
    span_tol: a feature adds a basis vector when its residual off the span
      exceeds ``span_tol * max(1, ||phi||)``.
    design_iters: Frank-Wolfe iterations of the D-optimal design.
  """

  name: str = "nullspace"
  sigma_theta: float = 1.0
  sigma_reward: float = 0.1
  ridge: float = 1.0
  beta: float = 1.0
  epsilon: float = 0.1
  rlsvi_noise: float = 1.0
  rlsvi_prior: float = 1.0
  span_tol: float = 1e-8
  design_iters: int = 500


def validate_agent_config(cfg: AgentConfig) -> None:
  """Raises ValueError for an unknown agent or a bad hyperparameter.

  ``beta`` may be traced (``train.simulate`` vmaps LSVI-UCB over its bonus scales); a
  traced value is checked by the caller that holds it concretely.
  """
  if cfg.name not in AGENTS:
    raise ValueError(f"agent name must be one of {AGENTS}, got {cfg.name!r}")
  for field in ("sigma_theta", "sigma_reward", "beta"):
    value = getattr(cfg, field)
    if not isinstance(value, jax.core.Tracer) and value < 0:
      raise ValueError(f"{field} must be >= 0, got {value!r}")
  for field in ("ridge", "rlsvi_noise", "rlsvi_prior", "span_tol"):
    if not getattr(cfg, field) > 0:
      raise ValueError(f"{field} must be > 0, got {getattr(cfg, field)!r}")
  if not 0.0 <= cfg.epsilon <= 1.0:
    raise ValueError(f"epsilon must be in [0, 1], got {cfg.epsilon!r}")
  if cfg.design_iters < 1:
    raise ValueError(f"design_iters must be >= 1, got {cfg.design_iters!r}")


# ----------------------------------------------------------------------------
# Linear algebra building blocks
# ----------------------------------------------------------------------------


def span_update(basis: Array, rank: Array, phi: Array,
                tol: float = 1e-8) -> tuple[Array, Array, Array]:
  """Adds ``phi`` to an orthonormal basis if it leaves the span.

  Classical Gram-Schmidt applied twice ("twice is enough") keeps the basis
  orthonormal to round-off.

  Args:
    basis: ``[d, d]``; columns ``< rank`` orthonormal, the rest zero.
    rank: int32 scalar.
    phi: ``[d]``.
    tol: relative residual threshold.

  Returns:
    ``(basis, rank, added)`` with ``added`` a bool scalar.
  """
  chex.assert_rank([basis, rank, phi], [2, 0, 1])
  chex.assert_shape(basis, (phi.shape[0], phi.shape[0]))
  residual = phi - basis @ (basis.T @ phi)
  residual = residual - basis @ (basis.T @ residual)
  norm = jnp.linalg.norm(residual)
  added = norm > tol * jnp.maximum(1.0, jnp.linalg.norm(phi))
  added = added & (rank < phi.shape[0])
  column = jnp.where(added, residual / jnp.where(added, norm, 1.0), 0.0)
  col_idx = jnp.minimum(rank, phi.shape[0] - 1)
  new_basis = jnp.where(added, basis.at[:, col_idx].set(column), basis)
  return new_basis, rank + added.astype(rank.dtype), added


def projector(basis: Array) -> Array:
  """Orthogonal projector ``P = B B^T [d, d]`` onto the span of ``basis``."""
  return basis @ basis.T


def min_norm_lstsq(basis: Array, rank: Array, gram: Array, features: Array,
                   targets: Array, weights: Array | None = None) -> Array:
  """Minimum-norm least squares ``argmin ||X theta - y||`` with ``theta`` in span.

  Solves in the coordinates of the data's orthonormal span basis ``B``
  (``theta = B c``, ``(B^T X^T X B) c = B^T X^T y``) with one step of iterative
  refinement on the residual (corrected semi-normal equations), so the
  accuracy is close to a QR solve while the per-episode cost stays
  ``O(T d + d^3)``. Padding rows of ``features`` must be zero.

  Args:
    basis: ``[d, d]`` orthonormal span basis of the rows of ``features``
      (zero columns beyond ``rank``).
    rank: int32 scalar.
    gram: ``[d, d]`` ``X^T X``.
    features: ``[T, d]`` ``X`` (zero rows are padding).
    targets: ``[T]`` ``y``.
    weights: ``[T]`` row multiplicities (``gram`` must be ``X^T W X``).

  Returns:
    ``theta [d]`` in the span of the data.
  """
  if weights is None:
    weights = jnp.ones_like(targets)
  return lstsq_solve(basis, lstsq_factor(basis, rank, gram), features,
                     targets, weights)


def lstsq_factor(basis: Array, rank: Array, gram: Array) -> Array:
  """Cholesky factor ``[d, d]`` of ``B^T X^T X B`` (identity on unused columns)."""
  d = basis.shape[0]
  unused = (jnp.arange(d) >= rank).astype(gram.dtype)
  return jnp.linalg.cholesky(basis.T @ gram @ basis + jnp.diag(unused))


def lstsq_solve(basis: Array, chol: Array, features: Array, targets: Array,
                weights: Array) -> Array:
  """Min-norm least squares from :func:`lstsq_factor`, with one refinement."""

  def solve(rhs):
    return basis @ cho_solve((chol, True), basis.T @ rhs)

  theta = solve(features.T @ (weights * targets))
  residual = targets - features @ theta
  return theta + solve(features.T @ (weights * residual))


def null_space_noise(basis: Array, design_gram: Array, key: Array,
                     scale: float | Array) -> Array:
  """Samples ``xi ~ N(0, scale^2 Q Lambda^{-1} Q)``, ``Q = I - P``.

  ``Lambda = P Lambda_0 P + Q Lambda_0 Q`` is block diagonal in
  (span, null space), so ``Q Lambda^{-1} Q = (Q Lambda_0 Q)^+``. With
  ``L L^T = Q Lambda_0 Q + P`` (positive definite when ``Lambda_0`` is),
  ``xi = scale Q L^{-T} z``. The final projection by ``Q`` is applied with the
  orthonormal basis so ``P xi`` is zero to round-off.

  Args:
    basis: ``[d, d]`` orthonormal span basis.
    design_gram: ``[d, d]`` ``Lambda_0 = sum_i rho_i phi_i phi_i^T``.
    key: PRNG key.
    scale: ``sigma_h``.

  Returns:
    ``xi [d]``.
  """
  d = basis.shape[0]
  proj = projector(basis)
  comp = jnp.eye(d, dtype=basis.dtype) - proj
  precision = comp @ design_gram @ comp + proj
  precision = 0.5 * (precision + precision.T)
  chol = jnp.linalg.cholesky(precision)
  z = prng.normal(key, (d,), basis.dtype)
  v = solve_triangular(chol.T, z, lower=False)
  return scale * (v - basis @ (basis.T @ v))


def gaussian_from_precision(precision: Array, rhs: Array, key: Array,
                            scale: float | Array) -> tuple[Array, Array]:
  """Mean ``precision^{-1} rhs`` and a sample ``N(mean, scale^2 precision^{-1})``.

  Args:
    precision: ``[d, d]`` positive definite.
    rhs: ``[d]``.
    key: PRNG key.
    scale: noise scale.

  Returns:
    ``(mean [d], sample [d])``.
  """
  chol = jnp.linalg.cholesky(precision)
  mean = cho_solve((chol, True), rhs)
  z = prng.normal(key, rhs.shape, precision.dtype)
  return mean, mean + scale * solve_triangular(chol.T, z, lower=False)


def d_optimal_design(candidates: Array, num_iters: int = 500
                     ) -> tuple[Array, Array, Array]:
  """D-optimal design over ``candidates [m, d]`` by Frank-Wolfe (Fedorov-Wynn).

  Maximises ``log det sum_i rho_i phi_i phi_i^T`` over the simplex: each step
  moves towards the candidate of largest leverage ``g_j = phi_j^T M^{-1}
  phi_j`` with the exact line-search step ``(g_j / d - 1) / (g_j - 1)``. By
  Kiefer-Wolfowitz the optimum has ``max_j g_j = d``.

  Args:
    candidates: ``[m, d]``, must span ``R^d``.
    num_iters: Frank-Wolfe iterations.

  Returns:
    ``(weights [m], design_gram [d, d], max_leverage [num_iters])`` (the max
    leverage before each step, which tends to ``d``).
  """
  m, d = candidates.shape

  def moment(weights):
    return (candidates * weights[:, None]).T @ candidates

  def body(weights, _):
    chol = jnp.linalg.cholesky(moment(weights))
    whitened = solve_triangular(chol, candidates.T, lower=True)
    leverage = jnp.sum(whitened**2, axis=0)
    j = jnp.argmax(leverage)
    g = leverage[j]
    step = jnp.clip((g / d - 1.0) / jnp.maximum(g - 1.0, 1e-12), 0.0, 1.0)
    weights = (1.0 - step) * weights + step * jax.nn.one_hot(
        j, m, dtype=weights.dtype)
    return weights, g

  weights0 = jnp.full((m,), 1.0 / m, candidates.dtype)
  weights, max_leverage = jax.lax.scan(body, weights0, None, length=num_iters)
  return weights, moment(weights), max_leverage


def design_gram(env: envs_lib.Env, params: Any, num_iters: int) -> Array:
  """``Lambda_0 [d, d]``: uniform ``I / d`` for one-hot features, else FW."""
  d = env.feature_dim
  if env.one_hot or env.design_candidates is None:
    return jnp.eye(d, dtype=jnp.float64) / d
  return d_optimal_design(env.design_candidates(params), num_iters)[1]


# ----------------------------------------------------------------------------
# Data store
# ----------------------------------------------------------------------------


class Data(NamedTuple):
  """Per-step history (leading axis ``H``), deduplicated by ``(state, action)``.

  Dynamics are deterministic, so every visit of the same ``(s_h, a_h)`` has the
  same feature and next state: least squares over all visits equals least
  squares over the distinct pairs weighted by their visit counts. Rewards are
  random, but their regression only needs ``X^T X`` and ``X^T r``. So the
  per-episode planning cost scales with the number of distinct pairs
  (``capacity``) rather than with ``T``; ``capacity = T`` is always enough.
  """

  features: Array       # [H, C, d] phi of each distinct (s, a)
  next_states: Array    # [H, C, S] its (deterministic) next state
  states: Array         # [H, C, S] the state (dedup key)
  actions: Array        # [H, C] the action as float64 (dedup key)
  counts: Array         # [H, C] visits (0 marks an empty row)
  num_rows: Array       # [H] int32 rows in use
  overflow: Array       # [H] int32 visits that found no free row (must be 0)
  gram: Array           # [H, d, d] X_h^T X_h over all visits
  reward_moment: Array  # [H, d] X_h^T r_h over all visits
  basis: Array          # [H, d, d] orthonormal span basis of X_h
  rank: Array           # [H] int32 dimension of the span
  count: Array          # [] int32 episodes stored


def data_capacity(env: envs_lib.Env, num_episodes: int,
                  capacity: int | None = None) -> int:
  """Rows per step: ``min(T, env bound on distinct pairs, capacity)``."""
  rows = num_episodes
  if env.max_distinct_per_step is not None:
    rows = min(rows, env.max_distinct_per_step)
  if capacity is not None:
    if capacity < 1:
      raise ValueError(f"capacity must be >= 1, got {capacity!r}")
    rows = min(rows, capacity)
  return rows


def init_data(env: envs_lib.Env, num_episodes: int,
              capacity: int | None = None) -> Data:
  """Empty :class:`Data` for ``num_episodes`` episodes."""
  h, d, s = env.horizon, env.feature_dim, env.state_dim
  c = data_capacity(env, num_episodes, capacity)
  f64 = jnp.float64
  return Data(
      features=jnp.zeros((h, c, d), f64),
      next_states=jnp.zeros((h, c, s), f64),
      states=jnp.zeros((h, c, s), f64),
      actions=jnp.zeros((h, c), f64),
      counts=jnp.zeros((h, c), f64),
      num_rows=jnp.zeros((h,), jnp.int32),
      overflow=jnp.zeros((h,), jnp.int32),
      gram=jnp.zeros((h, d, d), f64),
      reward_moment=jnp.zeros((h, d), f64),
      basis=jnp.zeros((h, d, d), f64),
      rank=jnp.zeros((h,), jnp.int32),
      count=jnp.zeros((), jnp.int32))


class Trajectory(NamedTuple):
  features: Array      # [H, d]
  next_states: Array   # [H, S]
  rewards: Array       # [H]
  mean_rewards: Array  # [H]
  actions: Array       # [H] int32 or float64
  states: Array        # [H, S]


class Table(NamedTuple):
  """One step's deduplicated visits (the first fields of :class:`Data`, one ``h``)."""

  features: Array      # [C, d]
  next_states: Array   # [C, S]
  states: Array        # [C, S]
  actions: Array       # [C]
  counts: Array        # [C]
  num_rows: Array      # [] int32
  overflow: Array      # [] int32


class Visit(NamedTuple):
  """One visit of ``(state, action)`` at one step."""

  feature: Array       # [d]
  next_state: Array    # [S]
  state: Array         # [S]
  action: Array        # [] float64


def _insert_row(table: Table, visit: Visit) -> Table:
  """Counts one visit of ``(state, action)`` in one step's table."""
  capacity = table.counts.shape[0]
  match = ((table.counts > 0) & jnp.all(table.states == visit.state, axis=-1) &
           (table.actions == visit.action))
  found = jnp.any(match)
  free = table.num_rows < capacity
  row = jnp.where(found, jnp.argmax(match), jnp.minimum(table.num_rows, capacity - 1))
  write = found | free
  new_row = ~found & free
  return Table(
      features=jnp.where(new_row, table.features.at[row].set(visit.feature),
                         table.features),
      next_states=jnp.where(new_row, table.next_states.at[row].set(visit.next_state),
                            table.next_states),
      states=jnp.where(new_row, table.states.at[row].set(visit.state), table.states),
      actions=jnp.where(new_row, table.actions.at[row].set(visit.action), table.actions),
      counts=jnp.where(write, table.counts.at[row].add(1.0), table.counts),
      num_rows=table.num_rows + new_row.astype(table.num_rows.dtype),
      overflow=table.overflow + (~write).astype(table.overflow.dtype))


def add_episode(data: Data, traj: Trajectory, span_tol: float
                ) -> tuple[Data, Array]:
  """Appends one episode; returns the new data and ``added [H]`` (new span dims)."""
  basis, rank, added = jax.vmap(
      lambda b, r, p: span_update(b, r, p, span_tol))(
          data.basis, data.rank, traj.features)
  table = Table(**{name: getattr(data, name) for name in Table._fields})
  visits = Visit(traj.features, traj.next_states, traj.states,
                 traj.actions.astype(jnp.float64))
  rows = jax.vmap(_insert_row)(table, visits)
  data = Data(
      **rows._asdict(),
      gram=data.gram + jnp.einsum("hi,hj->hij", traj.features, traj.features),
      reward_moment=data.reward_moment + traj.features * traj.rewards[:, None],
      basis=basis, rank=rank, count=data.count + 1)
  return data, added


# ----------------------------------------------------------------------------
# Agents
# ----------------------------------------------------------------------------


class Policy(NamedTuple):
  """What the agent acts on for one episode.

  ``q_weights`` define ``Q_h = <q_weights[h], phi>``; ``reward_weights`` is the
  sampled reward part (``omega_bar``, for the Lemma 2 read-out).
  ``ucb_precision_inv``/``ucb_weights`` are only set for LSVI-UCB on non
  one-hot features (``Q = min(<w, phi> + beta ||phi||_{Lambda^{-1}}, H - h)``).
  """

  q_weights: Array                  # [H, d]
  reward_weights: Array             # [H, d]
  ucb_precision_inv: Array | None   # [H, d, d]


def _ucb_q_all(env, params, h, state, policy_h_w, precision_inv, beta):
  """LSVI-UCB Q-values of every action at ``state`` (generic features)."""
  feats = env.all_features(params, h, state)  # [A, d]
  bonus = jnp.sqrt(jnp.maximum(
      jnp.einsum("ad,de,ae->a", feats, precision_inv, feats), 0.0))
  return jnp.minimum(feats @ policy_h_w + beta * bonus,
                     (env.horizon - h).astype(jnp.float64))


def _generic_ucb(env: envs_lib.Env, cfg: AgentConfig) -> bool:
  """LSVI-UCB with a bonus that is not linear in the features (non one-hot)."""
  return cfg.name == "lsvi_ucb" and not env.one_hot


def check_agent(env: envs_lib.Env, cfg: AgentConfig) -> None:
  """Raises ValueError for a bad ``cfg`` or an agent ``env`` cannot host."""
  validate_agent_config(cfg)
  if _generic_ucb(env, cfg) and env.all_features is None:
    raise ValueError(
        f"lsvi_ucb needs a finite action set; env {env.name!r} has none")


def next_values(env: envs_lib.Env, cfg: AgentConfig, params, h, next_states, q_next,
                precision_inv_next) -> Array:
  """``V_{h+1}(s')`` for every stored next state (0 after the last step)."""
  horizon = env.horizon
  h_next = jnp.minimum(h + 1, horizon - 1)
  if _generic_ucb(env, cfg):
    values = jax.vmap(lambda s: jnp.max(_ucb_q_all(
        env, params, h_next, s, q_next, precision_inv_next, cfg.beta)))(
            next_states)
  else:
    values = env.max_value(params, h_next, next_states, q_next)
  return jnp.where(h == horizon - 1, 0.0, values)


def factorise(env: envs_lib.Env, cfg: AgentConfig, gram, moment, basis, rank, k, design
              ) -> tuple[Array, Array, Array]:
  """Per-step work that does not depend on ``V_{h+1}`` (batched over h).

  Returns:
    ``(chol [d, d], offset [d], reward_part [d])``: the regression's Cholesky factor, the
    sampled part of ``Q_bar`` (nullspace: ``omega_bar + xi``; RLSVI: the posterior
    noise) and the sampled reward weights.
  """
  d = env.feature_dim
  eye = jnp.eye(d, dtype=jnp.float64)
  k_theta, k_reward = jax.random.split(k)
  if cfg.name == "nullspace":
    chol = lstsq_factor(basis, rank, gram)
    if env.one_hot or env.design_candidates is None:
      # Lambda_0 = I / d: Q Lambda^{-1} Q = d Q, so xi = sigma sqrt(d) Q z
      # exactly (same law as the Cholesky route, without a factorisation).
      z = prng.normal(k_theta, (d,), jnp.float64)
      xi = cfg.sigma_theta * jnp.sqrt(float(d)) * (z - basis @ (basis.T @ z))
    else:
      xi = null_space_noise(basis, design, k_theta, cfg.sigma_theta)
    _, omega_bar = gaussian_from_precision(
        cfg.ridge * eye + gram, moment, k_reward, cfg.sigma_reward)
    return chol, omega_bar + xi, omega_bar
  if cfg.name == "rlsvi":
    precision = gram / cfg.rlsvi_noise**2 + cfg.rlsvi_prior * eye
    chol = jnp.linalg.cholesky(precision)
    z = prng.normal(k_theta, (d,), jnp.float64)
    return chol, solve_triangular(chol.T, z, lower=False), jnp.zeros((d,))
  precision = cfg.ridge * eye + gram
  chol = jnp.linalg.cholesky(precision)
  return chol, jnp.zeros((d,)), jnp.zeros((d,))


def backward_step(env: envs_lib.Env, cfg: AgentConfig, params, carry, xs):
  """Step ``h`` of the backward pass (``h = H..1``): ``Q_h`` from ``V_{h+1}``."""
  q_next, prec_inv_next = carry
  h, feats, nxt, counts, moment, basis, chol, offset, reward_part = xs
  # Empty rows have zero features and zero counts: they contribute nothing.
  targets = next_values(env, cfg, params, h, nxt, q_next, prec_inv_next)
  prec_inv = prec_inv_next
  if cfg.name == "nullspace":
    # Q_bar = omega_bar + theta_hat + xi; offset = omega_bar + xi.
    q = offset + lstsq_solve(basis, chol, feats, targets, counts)
  elif cfg.name == "rlsvi":
    var = cfg.rlsvi_noise**2
    rhs = (moment + feats.T @ (counts * targets)) / var
    q = cho_solve((chol, True), rhs) + offset
    reward_part = q
  else:
    q = cho_solve((chol, True), moment + feats.T @ (counts * targets))
    if cfg.name == "lsvi_ucb":
      if env.one_hot:
        # One-hot: Lambda is diagonal and the capped bonus is per feature,
        # so UCB's Q is again linear with these weights.
        diag = jnp.sum(chol**2, axis=1)  # diag(L L^T)
        q = jnp.minimum(q + cfg.beta / jnp.sqrt(diag),
                        (env.horizon - h).astype(jnp.float64))
      else:
        prec_inv = cho_solve((chol, True), jnp.eye(env.feature_dim, dtype=jnp.float64))
    reward_part = q
  return (q, prec_inv), (q, reward_part, prec_inv)


def plan(env: envs_lib.Env, cfg: AgentConfig, data: Data, params, design: Array,
         key: Array) -> Policy:
  """The policy of the next episode from ``data``: one backward ``lax.scan`` over h."""
  horizon, d = env.horizon, env.feature_dim
  keys = jax.random.split(key, horizon)
  steps = jnp.arange(horizon)
  chols, offsets, reward_parts = jax.vmap(
      functools.partial(factorise, env, cfg), in_axes=(0, 0, 0, 0, 0, None))(
          data.gram, data.reward_moment, data.basis, data.rank, keys, design)
  init = (jnp.zeros((d,), jnp.float64), jnp.zeros((d, d), jnp.float64))
  xs = (steps, data.features, data.next_states, data.counts,
        data.reward_moment, data.basis, chols, offsets, reward_parts)
  _, (q_weights, reward_weights, prec_invs) = jax.lax.scan(
      functools.partial(backward_step, env, cfg, params), init, xs, reverse=True)
  return Policy(q_weights, reward_weights,
                prec_invs if _generic_ucb(env, cfg) else None)


def act(env: envs_lib.Env, cfg: AgentConfig, policy: Policy, params, h, state, key
        ) -> Array:
  """The action at step ``h`` in ``state``: greedy in ``Q_h`` (eps-greedy: or random)."""
  k_greedy, k_explore, k_random = jax.random.split(key, 3)
  if _generic_ucb(env, cfg):
    scores = _ucb_q_all(env, params, h, state, policy.q_weights[h],
                        policy.ucb_precision_inv[h], cfg.beta)
    action = envs_lib.random_argmax(scores, k_greedy)
  else:
    action = env.greedy(params, h, state, policy.q_weights[h], k_greedy)
  if cfg.name == "eps_greedy":
    explore = prng.bernoulli(k_explore, cfg.epsilon)
    action = jnp.where(explore, env.random_action(params, k_random), action)
  return action


# ----------------------------------------------------------------------------
# Episodes and runs
# ----------------------------------------------------------------------------


class EpisodeMetrics(NamedTuple):
  """Per-episode scalars (stacked to ``[T]`` by a run)."""

  regret: Array            # V*_1(s_1) - sum_h mean reward
  expected_return: Array   # sum_h mean reward of the realised path
  realised_return: Array   # sum_h realised reward
  out_of_span: Array       # bool: some phi_h left the span of earlier data
  new_dims: Array          # int32: span dimensions added this episode
  total_rank: Array        # int32: sum_h rank after the episode
  predicted_value: Array   # Q_bar_1(s_1, a_1) (= V_bar_1(s_1) when greedy)
  predicted_reward: Array  # sum_h <omega_bar_h, phi_h>
  nonconcave: Array        # int32: steps whose sampled Q is not concave in u


class RunOutput(NamedTuple):
  metrics: EpisodeMetrics  # fields [T] (or [seeds, T] after vmap)
  final_q_weights: Array   # [H, d] the plan of the last episode
  final_rank: Array        # [H]
  final_gram: Array        # [H, d, d]
  overflow: Array          # [] visits lost to a full history table (0)


def transition(env: envs_lib.Env, params, h, state, action, key
               ) -> tuple[Array, Trajectory]:
  """One step of ``env``: the next state and the step's record (a :class:`Trajectory` row)."""
  phi = env.feature(params, h, state, action)
  next_state, reward, mean = env.step(params, h, state, action, key)
  return next_state, Trajectory(features=phi, next_states=next_state, rewards=reward,
                                mean_rewards=mean, actions=action, states=state)


def learn(env: envs_lib.Env, span_tol: float, params, memory: tuple[Data, Array],
          policy: Policy, s1: Array, traj: Trajectory
          ) -> tuple[tuple[Data, Array], EpisodeMetrics]:
  """Stores an episode; memory is ``(data, q_weights of the last plan)``."""
  data, _ = memory
  data, added = add_episode(data, traj, span_tol)
  expected = jnp.sum(traj.mean_rewards)
  metrics = EpisodeMetrics(
      regret=env.optimal_value(params, s1) - expected,
      expected_return=expected,
      realised_return=jnp.sum(traj.rewards),
      out_of_span=jnp.any(added),
      new_dims=jnp.sum(added).astype(jnp.int32),
      total_rank=jnp.sum(data.rank),
      predicted_value=policy.q_weights[0] @ traj.features[0],
      predicted_reward=jnp.sum(policy.reward_weights * traj.features),
      nonconcave=env.num_nonconcave(policy.q_weights))
  return (data, policy.q_weights), metrics


def make_agent(env: envs_lib.Env, cfg: AgentConfig, params, design: Array
               ) -> tuple[contract.Agent, contract.Episodic]:
  """Agent ``cfg.name`` and ``env`` (per-seed ``params``) on the core episodic contract.

  Args:
    env: the environment.
    cfg: agent hyperparameters (checked by :func:`check_agent`).
    params: the seed's environment parameters (``env.sample_params``).
    design: ``Lambda_0 [d, d]`` (:func:`design_gram`).

  Returns:
    ``(agent, episodic)`` for ``contract.run_episodes``; the agent's memory is
    ``(Data, q_weights [H, d] of the last plan)``.
  """
  check_agent(env, cfg)
  agent = contract.Agent(
      plan=lambda memory, key: plan(env, cfg, memory[0], params, design, key),
      act=lambda policy, h, state, key: act(env, cfg, policy, params, h, state, key),
      learn=functools.partial(learn, env, cfg.span_tol, params))
  episodic = contract.Episodic(
      horizon=env.horizon, reset=functools.partial(env.initial_state, params),
      transition=functools.partial(transition, env, params))
  return agent, episodic


def run_episodes(env: envs_lib.Env, cfg: AgentConfig, num_episodes: int,
                 key: Array, capacity: int | None = None) -> RunOutput:
  """One seed: ``num_episodes`` episodes as one ``lax.scan`` (pure; trace in x64).

  Draws the seed's environment, then runs ``contract.run_episodes``.

  Args:
    env: the environment.
    cfg: agent hyperparameters.
    num_episodes: ``T``.
    key: PRNG key; it draws the per-seed environment (action map, matrices)
      and all of the agent's and environment's randomness.
    capacity: optional cap on the rows per step of the history (:func:`data_capacity`).

  Returns:
    :class:`RunOutput`.
  """
  if jnp.zeros(()).dtype != jnp.float64:
    raise ValueError("linear_rl needs float64: run inside "
                     "jaxlib_papers.core.precision.enable_x64()")
  check_agent(env, cfg)
  k_env, k_run = jax.random.split(key)
  params = env.sample_params(k_env)
  design = design_gram(env, params, cfg.design_iters)
  data = init_data(env, num_episodes, capacity)
  agent, episodic = make_agent(env, cfg, params, design)
  memory = (data, jnp.zeros((env.horizon, env.feature_dim), jnp.float64))
  (data, last_q), metrics = contract.run_episodes(agent, episodic, memory, k_run,
                                                  num_episodes)
  # The last episode's plan (from T - 1 episodes of data): a separate final
  # plan would double the compiled program for one read-out.
  return RunOutput(metrics, last_q, data.rank, data.gram,
                   jnp.sum(data.overflow))


def env_params_for_seed(env: envs_lib.Env, seed: int):
  """The per-seed environment parameters ``train.simulate`` draws for ``seed``."""
  with precision.enable_x64():
    k_env, _ = jax.random.split(jax.random.key(seed))
    return jax.tree.map(np.asarray, env.sample_params(k_env))
