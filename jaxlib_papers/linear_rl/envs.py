"""Deterministic-dynamics environments with linear features, as pure functions.

Every environment is an :class:`Env`: a ``NamedTuple`` of static sizes and pure
functions sharing one interface, so the agents in :mod:`kernel` never look
inside an environment. States are float64 vectors ``[state_dim]`` (so that
next states of every environment can be stored in one array), actions are an
int32 index (finite action sets) or a float64 scalar (LQR).

The three environments:

* :func:`deep_sea` -- the deep-exploration grid with a per-seed random action
  map and one-hot features over (column, action) at each step ``h``.
* :func:`linear_system` -- ``s' = A s + B a`` with ``K`` unit action vectors and
  features ``[s; a; 1] / sqrt(3)``. Linear Bellman complete: the maximum over
  actions does not depend on the state, so ``max_value`` costs one ``[K, d_a]``
  product per call whatever the number of states.
* :func:`lqr` -- scalar deterministic LQR ``x' = a x + b u`` with quadratic
  features ``[x^2, x u, u^2, x, u, 1]`` (scaled), bounded actions ``|u| <= U``.

Rewards are random in ``[0, 1]`` (Bernoulli with the mean reward when
``reward_noise`` is on) with mean linear in the features.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng

Array = jax.Array

# Relative tolerance for "equal" Q-values: exact ties (theta = 0 at unvisited
# features) must be broken at random, and round-off should not decide them.
TIE_RTOL = 1e-12


class Env(NamedTuple):
  """A deterministic-dynamics episodic environment with linear features.

  Attributes:
    name: environment name.
    horizon: episode length ``H``.
    feature_dim: ``d``.
    state_dim: length of the float64 state vector.
    num_actions: size of the finite action set, or 0 for continuous actions.
    one_hot: features are standard basis vectors (uniform D-optimal design,
      LSVI-UCB bonus is diagonal).
    sample_params: ``key -> params`` per-seed randomness (action map, matrices).
    initial_state: ``(params, key) -> state [state_dim]``.
    feature: ``(params, h, state, action) -> phi [d]``.
    step: ``(params, h, state, action, key) -> (next_state, reward,
      mean_reward)``.
    greedy: ``(params, h, state, theta [d], key) -> action`` maximising
      ``<theta, phi(state, a)>`` with random tie-breaking.
    max_value: ``(params, h, states [n, state_dim], theta [d]) -> [n]`` values
      ``max_a <theta, phi(s, a)>``.
    random_action: ``(params, key) -> action`` uniform over the action set.
    all_features: ``(params, h, state) -> [num_actions, d]`` (finite sets only,
      else None).
    optimal_value: ``(params, state) -> V*_1(state)``.
    design_candidates: ``params -> [m, d]`` candidate features for the
      D-optimal design (None for one-hot: the design is uniform).
    num_nonconcave: ``q_weights [H, d] -> int`` number of steps whose sampled
      Q is not strictly concave in the action (LQR; 0 elsewhere).
    null_action: a zero action of the right dtype (for scan carries).
    max_distinct_per_step: bound on distinct ``(state, action)`` pairs at a
      step (sizes the agents' deduplicated history), None if unbounded.
    info: static metadata (e.g. the LQR scales ``x_max, u_max, cost_scale``).
  """

  name: str
  horizon: int
  feature_dim: int
  state_dim: int
  num_actions: int
  one_hot: bool
  sample_params: Callable[..., Any]
  initial_state: Callable[..., Array]
  feature: Callable[..., Array]
  step: Callable[..., tuple[Array, Array, Array]]
  greedy: Callable[..., Array]
  max_value: Callable[..., Array]
  random_action: Callable[..., Array]
  all_features: Callable[..., Array] | None
  optimal_value: Callable[..., Array]
  design_candidates: Callable[..., Array] | None
  num_nonconcave: Callable[..., Array]
  null_action: Any
  max_distinct_per_step: int | None = None
  info: dict | None = None


def random_argmax(values: Array, key: Array) -> Array:
  """Index of the maximum of ``values [n]`` with ties broken uniformly.

  Args:
    values: ``[n]`` float values.
    key: PRNG key.

  Returns:
    int32 index; every index whose value is within ``TIE_RTOL`` (relative) of
    the maximum is equally likely.
  """
  best = jnp.max(values)
  tied = values >= best - TIE_RTOL * (1.0 + jnp.abs(best))
  scores = jnp.where(tied, prng.uniform(key, values.shape), -1.0)
  return jnp.argmax(scores).astype(jnp.int32)


def _bernoulli_or_mean(key, mean, reward_noise: bool):
  if not reward_noise:
    return mean
  return prng.bernoulli(key, jnp.clip(mean, 0.0, 1.0)).astype(mean.dtype)


def _no_nonconcave(q_weights):
  del q_weights
  return jnp.zeros((), jnp.int32)


# ----------------------------------------------------------------------------
# DeepSea
# ----------------------------------------------------------------------------


class DeepSeaSpec(NamedTuple):
  """Static settings of :func:`deep_sea`."""

  size: int                 # N
  reward_noise: bool        # Bernoulli rewards
  randomize_actions: bool   # per-seed random action map (else index 1 is right)


def _ds_col(state):
  return state[0].astype(jnp.int32)


def _ds_sample_params(spec: DeepSeaSpec, key):
  n = spec.size
  if spec.randomize_actions:
    right = prng.bernoulli(key, 0.5, (n, n)).astype(jnp.int32)
  else:
    right = jnp.ones((n, n), jnp.int32)
  return {"right": right}


def _ds_initial_state(params, key):
  del params, key
  return jnp.zeros((1,), jnp.float64)


def _ds_feature(spec: DeepSeaSpec, params, h, state, action):
  del params, h
  return jax.nn.one_hot(2 * _ds_col(state) + action, 2 * spec.size, dtype=jnp.float64)


def _ds_step(spec: DeepSeaSpec, params, h, state, action, key):
  n = spec.size
  col = _ds_col(state)
  moves_right = action == params["right"][h, col]
  next_col = jnp.where(moves_right, jnp.minimum(col + 1, n - 1),
                       jnp.maximum(col - 1, 0))
  goal = (h == n - 1) & (col == n - 1)
  mean = jnp.where(moves_right, jnp.where(goal, 1.0, 0.0),
                   0.01 / n).astype(jnp.float64)
  reward = _bernoulli_or_mean(key, mean, spec.reward_noise)
  return next_col.astype(jnp.float64)[None], reward, mean


def _ds_greedy(params, h, state, theta, key):
  del params, h
  col = _ds_col(state)
  return random_argmax(jax.lax.dynamic_slice(theta, (2 * col,), (2,)), key)


def _ds_max_value(params, h, states, theta):
  del params, h
  cols = states[:, 0].astype(jnp.int32)
  return jnp.maximum(theta[2 * cols], theta[2 * cols + 1])


def _ds_random_action(params, key):
  del params
  return prng.randint(key, (), 0, 2, jnp.int32)


def _ds_all_features(spec: DeepSeaSpec, params, h, state):
  del params, h
  return jax.nn.one_hot(2 * _ds_col(state) + jnp.arange(2), 2 * spec.size,
                        dtype=jnp.float64)


def _ds_optimal_value(params, state):
  del params, state
  return jnp.ones((), jnp.float64)


def deep_sea(size: int, reward_noise: bool = False,
             randomize_actions: bool = True) -> Env:
  """DeepSea of side ``N = size``, horizon ``N``.

  At step ``h`` (0-based) the agent is in row ``h`` at column ``c <= h``. The
  per-seed action map ``right[h, c] in {0, 1}`` says which action index moves
  right (``c + 1``, capped at ``N - 1``); the other moves left (``c - 1``,
  floored at 0). Mean rewards: moving left pays ``0.01 / N`` (the tempting
  myopic choice), moving right pays 0 except at the last step in column
  ``N - 1``, which pays 1. So ``V* = 1`` (always right) and always-left earns
  0.01, regret 0.99 per episode.

  Features at step ``h``: one-hot of ``2 c + a`` in ``R^{2N}`` (the row is the
  step, so per-step weights make this the tabular linear MDP; it is linear
  Bellman complete because the next column is a function of ``(c, a)``).

  Args:
    size: grid side ``N >= 2``.
    reward_noise: Bernoulli rewards with the mean above, else deterministic.
    randomize_actions: per-seed random action map (else index 1 is right).

  Returns:
    The :class:`Env`.
  """
  if not isinstance(size, (int, np.integer)) or size < 2:
    raise ValueError(f"size must be an int >= 2, got {size!r}")
  spec = DeepSeaSpec(int(size), reward_noise, randomize_actions)
  d = 2 * spec.size
  bind = functools.partial
  return Env(
      name="deep_sea", horizon=spec.size, feature_dim=d, state_dim=1, num_actions=2,
      one_hot=True, sample_params=bind(_ds_sample_params, spec),
      initial_state=_ds_initial_state, feature=bind(_ds_feature, spec),
      step=bind(_ds_step, spec), greedy=_ds_greedy, max_value=_ds_max_value,
      random_action=_ds_random_action, all_features=bind(_ds_all_features, spec),
      optimal_value=_ds_optimal_value, design_candidates=None,
      num_nonconcave=_no_nonconcave, null_action=np.zeros((), np.int32),
      max_distinct_per_step=d)


# ----------------------------------------------------------------------------
# Deterministic linear system with a large finite action set
# ----------------------------------------------------------------------------

_LIN_SCALE = math.sqrt(3.0)  # ||[s; a; 1]|| <= sqrt(3) when ||s||, ||a|| <= 1


class LinearSystemSpec(NamedTuple):
  """Static settings of :func:`linear_system`."""

  state_dim: int              # d_s
  action_dim: int             # d_a
  num_actions: int            # K
  horizon: int                # H
  contraction: float          # rho
  reward_noise: bool          # Bernoulli rewards
  num_design_candidates: int  # features the D-optimal design chooses from


def _unit(key, shape):
  x = prng.normal(key, shape, jnp.float64)
  return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def _ls_sample_params(spec: LinearSystemSpec, key):
  ds, da, k = spec.state_dim, spec.action_dim, spec.num_actions
  ko, kb, ka, kw1, kw2, ks, kr = jax.random.split(key, 7)
  orth, _ = jnp.linalg.qr(prng.normal(ko, (ds, ds), jnp.float64))
  gmat = prng.normal(kb, (ds, da), jnp.float64)
  gmat = gmat / jnp.linalg.norm(gmat, ord=2)
  radius = prng.uniform(kr, (), jnp.float64) ** (1.0 / ds)
  return {
      "A": spec.contraction * orth,
      "B": (1.0 - spec.contraction) * gmat,
      "actions": _unit(ka, (k, da)),
      "w_s": 0.25 * _unit(kw1, (ds,)),
      "w_a": 0.25 * _unit(kw2, (da,)),
      "s1": radius * _unit(ks, (ds,)),
  }


def _ls_reward_weights(params):
  # <omega, [s; a; 1] / c> = 0.5 + <w_s, s> + <w_a, a>.
  return _LIN_SCALE * jnp.concatenate(
      [params["w_s"], params["w_a"], jnp.full((1,), 0.5)])


def _ls_initial_state(params, key):
  del key
  return params["s1"]


def _ls_phi(state, action_vec):
  return jnp.concatenate(
      [state, action_vec, jnp.ones((1,), jnp.float64)]) / _LIN_SCALE


def _ls_feature(params, h, state, action):
  del h
  return _ls_phi(state, params["actions"][action])


def _ls_step(spec: LinearSystemSpec, params, h, state, action, key):
  del h
  a_vec = params["actions"][action]
  next_state = params["A"] @ state + params["B"] @ a_vec
  mean = 0.5 + params["w_s"] @ state + params["w_a"] @ a_vec
  return next_state, _bernoulli_or_mean(key, mean, spec.reward_noise), mean


def _ls_greedy(spec: LinearSystemSpec, params, h, state, theta, key):
  del h, state  # the state term is common to all actions
  ds, da = spec.state_dim, spec.action_dim
  return random_argmax(params["actions"] @ theta[ds:ds + da], key)


def _ls_max_value(spec: LinearSystemSpec, params, h, states, theta):
  del h
  ds, da = spec.state_dim, spec.action_dim
  best_action = jnp.max(params["actions"] @ theta[ds:ds + da])
  return (states @ theta[:ds] + best_action + theta[-1]) / _LIN_SCALE


def _ls_random_action(spec: LinearSystemSpec, params, key):
  del params
  return prng.randint(key, (), 0, spec.num_actions, jnp.int32)


def _ls_all_features(params, h, state):
  del h
  return jax.vmap(lambda a: _ls_phi(state, a))(params["actions"])


def _ls_optimal_value(spec: LinearSystemSpec, params, state):
  thetas = linear_system_optimal_weights(params, spec.horizon, _ls_reward_weights)
  return _ls_max_value(spec, params, 0, state[None], thetas[0])[0]


def _ls_design_candidates(spec: LinearSystemSpec, params):
  num, ds = spec.num_design_candidates, spec.state_dim
  key = jax.random.key(12345)
  k1, k2, k3 = jax.random.split(key, 3)
  radius = prng.uniform(k1, (num, 1)) ** (1.0 / ds)
  states = radius * _unit(k2, (num, ds))
  idx = prng.randint(k3, (num,), 0, spec.num_actions)
  return jax.vmap(_ls_phi)(states, params["actions"][idx])


def linear_system(state_dim: int = 3, action_dim: int = 3,
                  num_actions: int = 100, horizon: int = 5,
                  contraction: float = 0.8, reward_noise: bool = True,
                  num_design_candidates: int = 256) -> Env:
  """``s' = A s + B a`` with ``K`` unit actions; ``phi = [s; a; 1] / sqrt(3)``.

  Per seed: ``A = contraction * O`` (``O`` orthogonal), ``B = (1 -
  contraction) * G / ||G||_2`` so that ``||s|| <= 1`` forever; the ``K``
  actions are uniform on the unit sphere of ``R^{d_a}``; ``s_1`` is uniform in
  the unit ball; mean reward ``0.5 + <w_s, s> + <w_a, a>`` with ``||w_s|| =
  ||w_a|| = 0.25``, so it lies in ``[0, 1]`` and is linear in ``phi``.

  Linear Bellman completeness: ``max_a' <theta, phi(A s + B a, a')> =
  <T theta, phi(s, a)>`` with ``T theta = [A^T th_s; B^T th_s; th_1 + max_k
  <th_a, a_k>]``; :func:`linear_system_optimal_weights` uses it for ``V*``.

  Args:
    state_dim: ``d_s >= 1``.
    action_dim: ``d_a >= 1``.
    num_actions: ``K >= 2``.
    horizon: ``H >= 1``.
    contraction: ``rho`` in ``(0, 1)``.
    reward_noise: Bernoulli rewards.
    num_design_candidates: features the D-optimal design chooses from.

  Returns:
    The :class:`Env`; ``feature_dim = d_s + d_a + 1``.
  """
  for name, value, low in (("state_dim", state_dim, 1),
                           ("action_dim", action_dim, 1),
                           ("num_actions", num_actions, 2),
                           ("horizon", horizon, 1),
                           ("num_design_candidates", num_design_candidates,
                            1)):
    if not isinstance(value, (int, np.integer)) or value < low:
      raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
  if not 0.0 < contraction < 1.0:
    raise ValueError(f"contraction must be in (0, 1), got {contraction!r}")
  spec = LinearSystemSpec(int(state_dim), int(action_dim), int(num_actions), horizon,
                          contraction, reward_noise, num_design_candidates)
  bind = functools.partial
  return Env(
      name="linear_system", horizon=int(horizon),
      feature_dim=spec.state_dim + spec.action_dim + 1, state_dim=spec.state_dim,
      num_actions=spec.num_actions, one_hot=False,
      sample_params=bind(_ls_sample_params, spec), initial_state=_ls_initial_state,
      feature=_ls_feature, step=bind(_ls_step, spec), greedy=bind(_ls_greedy, spec),
      max_value=bind(_ls_max_value, spec), random_action=bind(_ls_random_action, spec),
      all_features=_ls_all_features, optimal_value=bind(_ls_optimal_value, spec),
      design_candidates=bind(_ls_design_candidates, spec),
      num_nonconcave=_no_nonconcave, null_action=np.zeros((), np.int32))


def linear_system_optimal_weights(params, horizon: int,
                                  reward_weights_fn=None) -> Array:
  """Exact ``Q*_h`` weights ``[H, d]`` of :func:`linear_system` by backward DP.

  ``theta*_H = omega``, ``theta*_h = omega + T theta*_{h+1}`` (see
  :func:`linear_system`).
  """
  ds = params["A"].shape[0]
  da = params["actions"].shape[1]
  if reward_weights_fn is None:
    omega = _LIN_SCALE * jnp.concatenate(
        [params["w_s"], params["w_a"], jnp.full((1,), 0.5)])
  else:
    omega = reward_weights_fn(params)

  def backup(theta_next, _):
    th_s, th_a, th_1 = theta_next[:ds], theta_next[ds:ds + da], theta_next[-1]
    completed = jnp.concatenate([
        params["A"].T @ th_s, params["B"].T @ th_s,
        (th_1 + jnp.max(params["actions"] @ th_a))[None]])
    theta = omega + completed
    return theta, theta

  zero = jnp.zeros_like(omega)
  _, thetas = jax.lax.scan(backup, zero, None, length=horizon)
  return thetas[::-1]


# ----------------------------------------------------------------------------
# Deterministic LQR with quadratic features
# ----------------------------------------------------------------------------

_SQRT6 = math.sqrt(6.0)


class LQRSpec(NamedTuple):
  """Settings of :func:`lqr` (see there)."""

  a: float = 0.5
  b: float = 1.0
  q: float = 1.0
  r: float = 1.0
  action_bound: float = 2.0
  horizon: int = 5
  initial_bound: float = 1.0
  reward_noise: bool = False
  design_grid: int = 7


class LQRModel(NamedTuple):
  """An :class:`LQRSpec` with its derived scales (what the LQR's functions read)."""

  spec: LQRSpec
  x_max: float       # X, bound on every reachable state
  u_max: float       # U, the action bound
  cost_scale: float  # C = q X^2 + r U^2


def _check_lqr(spec: LQRSpec) -> LQRModel:
  """Validates ``spec`` and derives its scales."""
  a, b, q, r = spec.a, spec.b, spec.q, spec.r
  if not abs(a) < 1.0:
    raise ValueError(f"a must satisfy |a| < 1, got {a!r}")
  if b == 0:
    raise ValueError("b must be non-zero")
  if q <= 0 or r <= 0:
    raise ValueError(f"q and r must be positive, got q={q!r}, r={r!r}")
  if spec.action_bound <= 0 or spec.initial_bound <= 0:
    raise ValueError("action_bound and initial_bound must be positive")
  if not isinstance(spec.horizon, (int, np.integer)) or spec.horizon < 1:
    raise ValueError(f"horizon must be an int >= 1, got {spec.horizon!r}")
  u_max = float(spec.action_bound)
  x_max = max(float(spec.initial_bound), abs(b) * u_max / (1.0 - abs(a)))
  # Riccati gains satisfy |K| < |a / b|; the optimum is interior on |x| <= X
  # when |a / b| X <= U.
  if abs(a / b) * x_max > u_max * (1 + 1e-12):
    raise ValueError(
        "the Riccati action could leave [-U, U] on reachable states "
        f"(|a/b| X = {abs(a / b) * x_max:.3g} > U = {u_max:.3g}); "
        "choose smaller |a| or larger action_bound")
  return LQRModel(spec, x_max, u_max, q * x_max**2 + r * u_max**2)


def _lqr_sample_params(model: LQRModel, key):
  del key
  return {"a": jnp.asarray(model.spec.a, jnp.float64),
          "b": jnp.asarray(model.spec.b, jnp.float64)}


def _lqr_initial_state(model: LQRModel, params, key):
  del params
  bound = model.spec.initial_bound
  return prng.uniform(key, (1,), jnp.float64, -bound, bound)


def _lqr_phi(model: LQRModel, x, u):
  x_max, u_max = model.x_max, model.u_max
  return jnp.stack([x * x / x_max**2, x * u / (x_max * u_max),
                    u * u / u_max**2, x / x_max, u / u_max,
                    jnp.ones_like(x)], axis=-1) / _SQRT6


def _lqr_feature(model: LQRModel, params, h, state, action):
  del params, h
  return _lqr_phi(model, state[0], action)


def _lqr_step(model: LQRModel, params, h, state, action, key):
  del h
  q, r = model.spec.q, model.spec.r
  x = state[0]
  mean = 1.0 - (q * x * x + r * action * action) / model.cost_scale
  next_state = params["a"] * state + params["b"] * action
  return next_state, _bernoulli_or_mean(key, mean, model.spec.reward_noise), mean


def _lqr_coefficients(model: LQRModel, x, theta):
  # Q(x, u) = c2 u^2 + c1 u + c0.
  x_max, u_max = model.x_max, model.u_max
  c2 = theta[2] / (u_max**2 * _SQRT6)
  c1 = (theta[1] * x / (x_max * u_max) + theta[4] / u_max) / _SQRT6
  c0 = (theta[0] * x * x / x_max**2 + theta[3] * x / x_max +
        theta[5]) / _SQRT6
  return c2, c1, c0


def _lqr_maximise(model: LQRModel, x, theta):
  u_max = model.u_max
  c2, c1, c0 = _lqr_coefficients(model, x, theta)
  concave = c2 < 0
  interior = jnp.clip(-c1 / jnp.where(concave, 2 * c2, -1.0), -u_max, u_max)
  endpoint = jnp.where(c1 >= 0, u_max, -u_max)
  u = jnp.where(concave, interior, endpoint)
  return u, c2 * u * u + c1 * u + c0, c1


def _lqr_greedy(model: LQRModel, params, h, state, theta, key):
  del params, h
  u_max = model.u_max
  u, _, c1 = _lqr_maximise(model, state[0], theta)
  c2 = theta[2]
  # Non-concave with c1 == 0: both end points tie.
  tie = (c2 >= 0) & (jnp.abs(c1) <= TIE_RTOL * (1.0 + jnp.abs(theta).max()))
  coin = prng.bernoulli(key)
  return jnp.where(tie, jnp.where(coin, u_max, -u_max), u)


def _lqr_max_value(model: LQRModel, params, h, states, theta):
  del params, h
  return jax.vmap(lambda x: _lqr_maximise(model, x, theta)[1])(states[:, 0])


def _lqr_random_action(model: LQRModel, params, key):
  del params
  return prng.uniform(key, (), jnp.float64, -model.u_max, model.u_max)


def _lqr_optimal_value(model: LQRModel, params, state):
  del params
  spec = model.spec
  _, p, const = lqr_riccati(spec.a, spec.b, spec.q / model.cost_scale,
                            spec.r / model.cost_scale, spec.horizon)
  return const[0] - p[0] * state[0] ** 2


def _lqr_design_candidates(model: LQRModel, params):
  del params
  grid = model.spec.design_grid
  xs = jnp.linspace(-model.x_max, model.x_max, grid)
  us = jnp.linspace(-model.u_max, model.u_max, grid)
  xx, uu = jnp.meshgrid(xs, us, indexing="ij")
  return _lqr_phi(model, xx.ravel(), uu.ravel())


def _lqr_num_nonconcave(q_weights):
  return jnp.sum(q_weights[:, 2] >= 0).astype(jnp.int32)


def lqr(spec: LQRSpec | None = None, /, **fields: Any) -> Env:
  """Scalar deterministic LQR, ``x' = a x + b u``, ``|u| <= U``.

  Mean reward ``1 - (q x^2 + r u^2) / C`` with ``C = q X^2 + r U^2`` where
  ``X = max(initial_bound, |b| U / (1 - |a|))`` bounds every reachable state,
  so rewards lie in ``[0, 1]``. The initial state is uniform on
  ``[-initial_bound, initial_bound]`` each episode (with a fixed ``x_1`` the
  step-1 features span only 3 of 6 dimensions). Features
  ``[x^2/X^2, x u/(X U), u^2/U^2, x/X, u/U, 1] / sqrt(6)``.

  The greedy action for weights ``theta`` is the maximiser of a quadratic in
  ``u`` on ``[-U, U]``: the clipped stationary point if the ``u^2``
  coefficient is negative, else the better end point (ties random). With
  ``|a| <= 0.5 |b|``-style parameters (checked) the Riccati action ``K_h x``
  stays inside the bounds on every reachable state, so ``Q*`` is exactly
  quadratic there and the features are Bellman complete on the reachable set.

  Args:
    spec: an :class:`LQRSpec` (default ``LQRSpec()``), its fields replaced by ``fields``.
    **fields: fields of :class:`LQRSpec`:
    a, b: dynamics, ``|a| < 1``, ``b != 0``.
    q, r: state and action cost weights, positive.
    action_bound: ``U > 0``.
    horizon: ``H >= 1``.
    initial_bound: ``|x_1| <= initial_bound``.
    reward_noise: Bernoulli rewards.
    design_grid: ``g``: the D-optimal design picks from a ``g x g`` grid of
      ``(x, u)``.

  Returns:
    The :class:`Env` (``num_actions = 0``: continuous actions).
  """
  spec = (LQRSpec() if spec is None else spec)._replace(**fields)
  model = _check_lqr(spec)
  bind = functools.partial
  return Env(
      name="lqr", horizon=int(spec.horizon), feature_dim=6, state_dim=1,
      num_actions=0, one_hot=False, sample_params=bind(_lqr_sample_params, model),
      initial_state=bind(_lqr_initial_state, model), feature=bind(_lqr_feature, model),
      step=bind(_lqr_step, model), greedy=bind(_lqr_greedy, model),
      max_value=bind(_lqr_max_value, model),
      random_action=bind(_lqr_random_action, model), all_features=None,
      optimal_value=bind(_lqr_optimal_value, model),
      design_candidates=bind(_lqr_design_candidates, model),
      num_nonconcave=_lqr_num_nonconcave, null_action=np.zeros((), np.float64),
      info={"x_max": model.x_max, "u_max": model.u_max, "cost_scale": model.cost_scale,
            "a": float(spec.a), "b": float(spec.b), "q": float(spec.q),
            "r": float(spec.r)})


def lqr_scales(env: Env) -> tuple[float, float, float]:
  """``(X, U, C)``: state bound, action bound and reward cost scale of an LQR env."""
  if env.name != "lqr" or not env.info:
    raise ValueError("env must be an Env made by lqr()")
  return env.info["x_max"], env.info["u_max"], env.info["cost_scale"]


def lqr_riccati(a: float, b: float, q: float, r: float, horizon: int):
  """Finite-horizon Riccati recursion for reward ``1 - q x^2 - r u^2``.

  ``V_h(x) = c_h - p_h x^2``, ``p_{H+1} = 0``, ``c_{H+1} = 0``;
  ``K_h = -a b p_{h+1} / (r + b^2 p_{h+1})``,
  ``p_h = q + a^2 p_{h+1} r / (r + b^2 p_{h+1})``, ``c_h = 1 + c_{h+1}``.

  Returns:
    ``(gains [H], p [H + 1], const [H + 1])`` as numpy float64, 0-based steps.
  """
  gains = np.zeros(horizon)
  p = np.zeros(horizon + 1)
  const = np.zeros(horizon + 1)
  for h in range(horizon - 1, -1, -1):
    pn = p[h + 1]
    gains[h] = -a * b * pn / (r + b * b * pn)
    p[h] = q + a * a * pn * r / (r + b * b * pn)
    const[h] = 1.0 + const[h + 1]
  return gains, p, const


def lqr_gains_from_weights(env: Env, q_weights) -> np.ndarray:
  """Greedy linear gains ``u = K_h x`` read from Q weights ``[H, 6]``.

  ``argmax_u Q`` is ``-(th_xu U x / X + th_u U) / (2 th_uu)``; the gain is the
  coefficient of ``x`` (the offset should vanish).
  """
  x_max, u_max, _ = lqr_scales(env)
  q_weights = np.asarray(q_weights)
  return -q_weights[:, 1] * u_max / (2.0 * q_weights[:, 2] * x_max)


def make_env(name: str, **kwargs) -> Env:
  """Builds an environment by name: ``deep_sea``, ``linear_system``, ``lqr``."""
  makers = {"deep_sea": deep_sea, "linear_system": linear_system, "lqr": lqr}
  if name not in makers:
    raise ValueError(f"env name must be one of {sorted(makers)}, got {name!r}")
  return makers[name](**kwargs)
