"""Fixed-step SDE and ODE solvers as one ``lax.scan`` each.

Time grids may decrease (integration backward in time: ``dt < 0``, noise scaled by
``sqrt(|dt|)``). There are no per-step callbacks: ask for the whole path
(``save_path=True``, leading axis ``len(ts)``) or for the final state only.

Drift/vector-field signature: ``f(t, y, args) -> dy/dt`` with ``y`` any pytree (ODE) or an
array (SDE). Orders of convergence (tested): Euler 1, Heun 2, Euler-Maruyama strong 1/2
(1 for additive noise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxlib_papers.core import prng

PyTree = Any
VectorField = Callable[[jax.Array, PyTree, Any], PyTree]

_METHODS = ("euler", "heun")


def _check_grid(ts: ArrayLike) -> jax.Array:
  ts = jnp.asarray(ts)
  if ts.ndim != 1 or ts.shape[0] < 2:
    raise ValueError(f"ts must be a 1-D time grid with at least 2 points; got shape {ts.shape}")
  return ts


def _axpy(a: jax.Array, x: PyTree, y: PyTree) -> PyTree:
  return jax.tree.map(lambda xi, yi: yi + a * xi, x, y)


def ode_solve(
    vector_field: VectorField,
    y0: PyTree,
    ts: ArrayLike,
    *,
    method: str = "euler",
    args: Any = None,
    save_path: bool = True,
) -> PyTree:
  """Solves ``dy/dt = vector_field(t, y, args)`` on the grid ``ts``.

  Args:
    vector_field: ``(t: [], y, args) -> dy/dt`` (same pytree structure as ``y``).
    y0: initial state at ``ts[0]``; any pytree of arrays.
    ts: [S] monotone time grid (increasing or decreasing).
    method: ``"euler"`` (order 1) or ``"heun"`` (explicit trapezoid, order 2).
    args: passed through to ``vector_field``.
    save_path: return every grid state (leading axis ``S``) or only the last.

  Returns:
    A pytree like ``y0``: leaves ``[S, ...]`` if ``save_path`` else ``[...]``.
  """
  ts = _check_grid(ts)
  if method not in _METHODS:
    raise ValueError(f"method must be one of {_METHODS}; got {method!r}")

  def step(y, t_pair):
    t0, t1 = t_pair
    dt = t1 - t0
    k1 = vector_field(t0, y, args)
    if method == "euler":
      y_next = _axpy(dt, k1, y)
    else:
      y_pred = _axpy(dt, k1, y)
      k2 = vector_field(t1, y_pred, args)
      y_next = jax.tree.map(lambda yi, a, b: yi + 0.5 * dt * (a + b), y, k1, k2)
    return y_next, (y_next if save_path else None)

  y_last, path = jax.lax.scan(step, y0, (ts[:-1], ts[1:]))
  if not save_path:
    return y_last
  return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b], axis=0), y0, path)


def euler_maruyama(
    drift: VectorField,
    diffusion: float | Callable[[jax.Array, jax.Array, Any], ArrayLike],
    x0: jax.Array,
    ts: ArrayLike,
    key: jax.Array,
    *,
    args: Any = None,
    save_path: bool = True,
) -> jax.Array:
  """Euler-Maruyama for ``dX = drift(t, X) dt + diffusion(t, X) dW`` (diagonal noise).

  Backward in time (decreasing ``ts``) the same update runs with ``dt < 0`` and noise of
  variance ``diffusion^2 |dt|``, which is how a backward SDE of a time-reversed process
  is simulated.

  Args:
    drift: ``(t: [], x: [..., D], args) -> [..., D]``.
    diffusion: a constant, or ``(t, x, args) -> array`` broadcastable to ``x``.
    x0: [..., D] initial state at ``ts[0]``.
    ts: [S] monotone time grid.
    key: a PRNG key; one normal draw per step, shaped like ``x0``.
    args: passed through to ``drift`` and ``diffusion``.
    save_path: return ``[S, ..., D]`` or only the final ``[..., D]``.

  Returns:
    The path or the final state.
  """
  ts = _check_grid(ts)
  x0 = jnp.asarray(x0)
  if not callable(diffusion):
    sigma = jnp.asarray(diffusion, dtype=x0.dtype)
    diffusion_fn = lambda t, x, a: sigma
  else:
    diffusion_fn = diffusion
  keys = jax.random.split(key, ts.shape[0] - 1)

  def step(x, inputs):
    t0, t1, k = inputs
    dt = t1 - t0
    noise = prng.normal(k, x.shape, x.dtype)
    x_next = x + drift(t0, x, args) * dt + diffusion_fn(t0, x, args) * jnp.sqrt(jnp.abs(dt)) * noise
    return x_next, (x_next if save_path else None)

  x_last, path = jax.lax.scan(step, x0, (ts[:-1], ts[1:], keys))
  if not save_path:
    return x_last
  return jnp.concatenate([x0[None], path], axis=0)
