"""DeepRUOT inference programs: the learned dynamics pushed forward, sampled, measured.

Jitted functions of the trained ``[S]``-stacked params, built from the integrators of
``losses.py``: the ODE pushforward of weighted particles (evaluation, figures, stage 3's
pairs), the inference SDE, the path action, the exact-OT pairing of stage 3 (host) and the
calibration of the potential's free level before stage 4.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import ot as core_ot
from jaxlib_papers.ruot import losses as L
from jaxlib_papers.ruot.models import Networks


def interval_grids(times, dt: float) -> jax.Array:
  """[K-1, S+1] Euler grids padded by repeating the end time (zero steps are no-ops)."""
  dummy = [np.zeros((1, 1), np.float32)] * len(times)
  return L.padded_intervals(times, dummy, dt)[0]


def make_pushforward(nets: Networks, times, dt: float, method: str = "euler"):
  """Returns ``f(params [S-stacked], x0 [n, d]) -> (xs [S, K, n, d], log_ws [S, K, n])``.

  Particles start at ``x0`` with weights 1/n and are carried through ``times`` (jitted;
  one ``lax.scan`` over the intervals).
  """
  grids = interval_grids(times, dt)

  def one_seed(params, x0):
    v = lambda t, x: nets.velocity(params, t, x)
    g = lambda t, x: nets.growth(params, t, x)
    log_w0 = jnp.full((x0.shape[0],), -jnp.log(float(x0.shape[0])), x0.dtype)

    def interval(state, grid):
      state = L.weighted_flow(v, g, *state, grid, method=method)
      return state, state

    _, (xs, log_ws) = jax.lax.scan(interval, (x0, log_w0), grids)
    return (jnp.concatenate([x0[None], xs]), jnp.concatenate([log_w0[None], log_ws]))

  return jax.jit(jax.vmap(one_seed, in_axes=(0, None)))


def make_sde_sampler(nets: Networks, times, dt: float, sigma: float):
  """``f(params, x0, key) -> (xs [S, K, n, d], log_ws [S, K, n])`` from the inference SDE."""
  grid = np.concatenate([L.time_grid(float(a), float(b), dt)[:-1]
                         for a, b in zip(times[:-1], times[1:])] + [np.array(times[-1:])])
  index = np.searchsorted(grid, np.asarray(times) - 1e-9)

  def one_seed(params, x0, key):
    v = lambda t, x: nets.velocity(params, t, x)
    g = lambda t, x: nets.growth(params, t, x)
    s = lambda t, x: nets.potential(params, t, x)
    log_w0 = jnp.full((x0.shape[0],), -jnp.log(float(x0.shape[0])), x0.dtype)
    x_path, w_path = L.inference_sde(v, g, s, x0, log_w0, grid, key, sigma=sigma)
    return x_path[index], w_path[index]

  return jax.jit(jax.vmap(one_seed, in_axes=(0, None, 0)))


def calibrate_potential_level(nets: Networks, params, t0: float, x0, target, sigma: float):
  """Adds to ``s`` the constant that best matches ``exp(2 s(t0, x) / sigma^2)`` to ``target``.

  Score matching fixes only ``grad s``; the level of ``s`` is arbitrary, yet the stage-4
  PINN and initial-density terms use ``rho = exp(2 s / sigma^2)`` (32 s at sigma 0.25), so
  an arbitrary level makes them overflow (measured: stage 4 reached NaN on the gene data
  without this). We set the free constant so that ``log rho`` matches ``log target`` on
  average at the first snapshot (least squares in log space); the score is unchanged.

  Args:
    params: [S]-stacked params; x0: [n, d] first snapshot; target: [n] density there.

  Returns:
    params with the last bias of the ``s`` net shifted per seed.
  """
  s0 = jax.vmap(lambda p: nets.potential(p, t0, x0))(params)                 # [S, n]
  shift = jnp.mean(0.5 * sigma**2 * jnp.log(target)[None] - s0, axis=1)      # [S]
  layers = params["s"]["params"]
  last = max(layers, key=lambda name: int(name.split("_")[-1]))
  new_layers = dict(layers)
  new_layers[last] = dict(layers[last])
  new_layers[last]["bias"] = layers[last]["bias"] + shift[:, None]
  return {**params, "s": {**params["s"], "params": new_layers}}


def exact_pairs(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Exact-OT pairing of consecutive particle clouds (on the host, POT).

  Args:
    xs: [S, K, n, d] particle positions per seed and time (equal n: the plan of uniform
      weights is a permutation).

  Returns:
    ``(start, end)``, each [S, K-1, n, d]: ``end[s, k, i]`` is the OT partner of
    ``start[s, k, i] = xs[s, k, i]``.
  """
  xs = np.asarray(xs)
  ends = np.empty_like(xs[:, 1:])
  for s in range(xs.shape[0]):
    for k in range(xs.shape[1] - 1):
      plan = core_ot.exact_coupling(xs[s, k], xs[s, k + 1])
      ends[s, k] = xs[s, k + 1][np.argmax(plan, axis=1)]
  return xs[:, :-1], ends


def path_action(nets: Networks, params, x0, times, dt: float, sigma: float, alpha: float
                ) -> np.ndarray:
  """[S] total action sum_i int L w_i dt of the learned dynamics from the first snapshot."""
  grids = interval_grids(times, dt)

  def one_seed(p):
    v = lambda t, x: nets.velocity(p, t, x)
    g = lambda t, x: nets.growth(p, t, x)
    s = lambda t, x: nets.potential(p, t, x)
    log_w0 = jnp.full((x0.shape[0],), -jnp.log(float(x0.shape[0])), x0.dtype)

    def interval(state, grid):
      x, log_w = state
      x, log_w, action = L.weighted_flow_with_action((v, g, s), x, log_w, grid, sigma=sigma,
                                                     alpha=alpha)
      return (x, log_w), jnp.sum(action)

    _, actions = jax.lax.scan(interval, (x0, log_w0), grids)
    return jnp.sum(actions)

  return np.asarray(jax.jit(jax.vmap(one_seed))(params))
