"""DeepRUOT's equations: weighted-particle flow, action, inference SDE and the losses.

Math (Zhang, Li, Zhou, ICLR 2025). The regularised unbalanced OT problem over densities
with growth is solved in the reformulation ``v = b - sigma^2/2 grad log rho``,
``s = sigma^2/2 log rho``, which makes the density obey ``d_t rho + div(v rho) = g rho``.
Its action is

    int int [ 1/2 |v|^2 + 1/2 |grad s|^2 - s g - 1/2 sigma^2 g + alpha g^2 ] rho dx dt.

The density is carried by weighted particles: ``dx/dt = v(t, x)``, ``d ln w/dt = g(t, x)``,
``w(0) = 1/N0``, so ``sum_i w_i(t)`` is the mass relative to the first snapshot.

Everything here is a module-level pure function of arrays and fields
``(t, x: [n, d]) -> [n, ...]``; ``kernel.py`` composes them into the training stages.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxlib_papers.core import affinity, sde
from jaxlib_papers.core import ot as core_ot

PointField = Callable[[jax.Array, jax.Array], jax.Array]  # (t, x: [n, d]) -> [n, ...]


# ----------------------------------------------------------------------------------------
# Integrators.


def time_grid(t0: float, t1: float, dt: float) -> np.ndarray:
  """Fixed-step grid from ``t0`` to ``t1`` with step close to ``dt`` (at least one step)."""
  if dt <= 0:
    raise ValueError(f"dt must be > 0; got {dt}")
  num = max(1, int(round(abs(t1 - t0) / dt)))
  return np.linspace(t0, t1, num + 1)


def padded_intervals(times: Sequence[float], xs: Sequence[ArrayLike], dt: float,
                     equal_steps: bool = False):
  """Stacks the K - 1 intervals so one ``lax.scan`` can walk them.

  Targets are padded to the largest snapshot (padding has zero weight). Intervals of
  different lengths (a held-out time) share one grid shape in one of two ways:
  ``equal_steps=False`` keeps the step ``dt`` everywhere and pads the shorter grids by
  repeating their end time (a step with ``dt = 0`` leaves the state unchanged);
  ``equal_steps=True`` gives every interval the step count of the shortest one, so a
  longer interval takes proportionally longer steps and no compute is spent on padding.

  Returns:
    ``(grids [K-1, S+1], targets [K-1, M, d], mask [K-1, M] float, t_ends [K-1])``.
  """
  pairs = list(zip(times[:-1], times[1:]))
  if equal_steps:
    shortest = min(float(b) - float(a) for a, b in pairs)
    num = max(1, int(round(shortest / dt)))
    grids = [np.linspace(float(a), float(b), num + 1) for a, b in pairs]
  else:
    grids = [time_grid(float(a), float(b), dt) for a, b in pairs]
  steps = max(len(g) for g in grids)
  grids = np.stack([np.concatenate([g, np.full(steps - len(g), g[-1])]) for g in grids])
  width = max(int(np.shape(x)[0]) for x in xs[1:])
  dim = int(np.shape(xs[0])[1])
  targets = np.zeros((len(xs) - 1, width, dim), np.float32)
  mask = np.zeros((len(xs) - 1, width), np.float32)
  for k, x in enumerate(xs[1:]):
    targets[k, :len(x)] = np.asarray(x)
    mask[k, :len(x)] = 1.0
  return (jnp.asarray(grids, jnp.float32), jnp.asarray(targets), jnp.asarray(mask),
          jnp.asarray(np.asarray(times[1:], np.float32)))


def weighted_flow(
    velocity: PointField,
    growth: PointField,
    x0: jax.Array,
    log_w0: jax.Array,
    ts: ArrayLike,
    *,
    method: str = "euler",
    save_path: bool = False,
) -> tuple[jax.Array, jax.Array]:
  """Integrates ``dx/dt = v(t, x)``, ``d ln w/dt = g(t, x)`` on the grid ``ts``.

  Args:
    velocity: ``(t, x: [n, d]) -> [n, d]``.
    growth: ``(t, x: [n, d]) -> [n]``.
    x0: [n, d] particle positions at ``ts[0]``.
    log_w0: [n] log-weights at ``ts[0]``.
    ts: [S] time grid.
    method: ``"euler"`` (the paper's scheme) or ``"heun"``.
    save_path: return the whole path (leading axis S) instead of the end state.

  Returns:
    ``(x, log_w)``: ``[n, d]`` and ``[n]`` (or ``[S, n, d]`` and ``[S, n]``).
  """
  if x0.ndim != 2 or log_w0.shape != x0.shape[:1]:
    raise ValueError(f"x0 must be [n, d] and log_w0 [n]; got {x0.shape} and {log_w0.shape}")

  def vector_field(t, state, _):
    x, _ = state
    return velocity(t, x), growth(t, x)

  return sde.ode_solve(vector_field, (x0, log_w0), ts, method=method, save_path=save_path)


def potential_gradient(potential: PointField, t: ArrayLike, x: jax.Array) -> jax.Array:
  """``grad_x s(t, x)`` for every row of ``x: [n, d]`` (s acts row-wise) -> [n, d]."""
  return jax.grad(lambda z: jnp.sum(potential(t, z)))(x)


def lagrangian(v, grad_s, s, g, sigma: float, alpha: float) -> jax.Array:
  """Action density per particle, [n]: 1/2|v|^2 + 1/2|grad s|^2 - s g - sigma^2 g / 2 + alpha g^2.

  The squared norm of ``v`` is what the math says; the official code integrates ``|v| / 2``
  (a typo we do not copy).
  """
  return (0.5 * jnp.sum(v**2, -1) + 0.5 * jnp.sum(grad_s**2, -1) - s * g
          - 0.5 * sigma**2 * g + alpha * g**2)


def weighted_flow_with_action(
    fields: tuple[PointField, PointField, PointField],
    x0: jax.Array,
    log_w0: jax.Array,
    ts: ArrayLike,
    *,
    sigma: float,
    alpha: float = 1.0,
    method: str = "euler",
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Weighted flow plus the accumulated action ``m_i = int L(t, x_i) w_i dt``.

  Args:
    fields: ``(velocity, growth, potential)``, each ``(t, x: [n, d]) -> [n, d] | [n]``.
    x0, log_w0, ts, method: as :func:`weighted_flow`.
    sigma, alpha: diffusion and growth penalty of the action (:func:`lagrangian`).

  Returns:
    ``(x [n, d], log_w [n], action [n])`` at ``ts[-1]``; ``sum(action)`` is the path action
    of the mass carried by the particles.
  """
  velocity, growth, potential = fields

  def vector_field(t, state, _):
    x, log_w, _ = state
    v, g, s = velocity(t, x), growth(t, x), potential(t, x)
    grad_s = potential_gradient(potential, t, x)
    return v, g, lagrangian(v, grad_s, s, g, sigma, alpha) * jnp.exp(log_w)

  return sde.ode_solve(vector_field, (x0, log_w0, jnp.zeros_like(log_w0)), ts, method=method,
                       save_path=False)


def inference_sde(
    velocity: PointField,
    growth: PointField,
    potential: PointField,
    x0: jax.Array,
    log_w0: jax.Array,
    ts: ArrayLike,
    key: jax.Array,
    *,
    sigma: float,
) -> tuple[jax.Array, jax.Array]:
  """Euler-Maruyama for ``dX = (v + grad s) dt + sigma dW`` with ``d ln w = g dt``.

  Returns:
    ``(x [S, n, d], log_w [S, n])`` along the grid ``ts``.
  """
  chex.assert_rank([x0, log_w0], [2, 1])
  chex.assert_equal_shape_prefix([x0, log_w0], 1)
  dim = x0.shape[1]

  def drift(t, state, _):
    x = state[:, :dim]
    dx = velocity(t, x) + potential_gradient(potential, t, x)
    return jnp.concatenate([dx, growth(t, x)[:, None]], axis=1)

  # The log-weight rides along as an extra column with no noise.
  noise = jnp.concatenate([jnp.full((dim,), sigma, x0.dtype), jnp.zeros((1,), x0.dtype)])
  path = sde.euler_maruyama(drift, lambda t, x, a: noise,
                            jnp.concatenate([x0, log_w0[:, None]], axis=1), ts, key)
  return path[..., :dim], path[..., dim]


# ----------------------------------------------------------------------------------------
# Losses.


def squared_distances(x: jax.Array, y: jax.Array) -> jax.Array:
  """``[n, m]`` matrix of ``|x_i - y_j|^2``."""
  return jnp.maximum(
      jnp.sum(x**2, -1)[:, None] + jnp.sum(y**2, -1)[None, :] - 2.0 * x @ y.T, 0.0)


def _exact_plan_host(x, y, a, b):
  if not (np.all(np.isfinite(x)) and np.all(np.isfinite(a))):
    # Diverged particles: hand back a NaN plan so the loss turns NaN and the train loop
    # stops with the step number, instead of POT raising inside the callback.
    return np.full((np.shape(x)[0], np.shape(y)[0]), np.nan, np.asarray(x).dtype)
  plan = core_ot.exact_coupling(np.asarray(x), np.asarray(y), np.asarray(a), np.asarray(b))
  return plan.astype(np.asarray(x).dtype)


@functools.cache
def _host_pool() -> concurrent.futures.ThreadPoolExecutor:
  """One thread per CPU this process may use (made on first use, then kept)."""
  return concurrent.futures.ThreadPoolExecutor(
      max_workers=len(affinity.available()), thread_name_prefix="exact_ot")


def _exact_plans_host(x, y, a, b):
  """Exact plans of a batch of problems, ``[..., n, d]`` etc. -> ``[..., n, m]``.

  Under ``vmap`` (seeds) the callback receives every problem at once and solves them on
  the host's threads: POT's network simplex releases the GIL, so k problems take about
  the time of ceil(k / CPUs) (2 threads: 0.082 s against 0.162 s for four 400 x 969 plans
  on the 2-core machine). Each plan is the one the problem gets alone, bit for bit.
  """
  x, y, a, b = (np.asarray(v) for v in (x, y, a, b))
  lead = x.shape[:-2]
  problems = list(zip(*(v.reshape((-1,) + v.shape[len(lead):]) for v in (x, y, a, b))))
  if len(problems) == 1:
    plans = [_exact_plan_host(*problems[0])]
  else:
    plans = list(_host_pool().map(lambda problem: _exact_plan_host(*problem), problems))
  return np.stack(plans).reshape(lead + plans[0].shape)


def ot_plan(
    x: jax.Array, a: jax.Array, y: jax.Array, b: jax.Array | None = None, *,
    method: str = "sinkhorn", epsilon: float = 0.01, threshold: float = 1e-3,
    max_iterations: int = 2000,
) -> jax.Array:
  """Coupling ``[n, m]`` between weighted particles ``(x, a)`` and data ``(y, b)``.

  ``b`` defaults to uniform; zero entries mark padding. On CPU the exact plan is the
  faster one at the paper's sizes (400 x 969 cells: POT 0.3 s, ott Sinkhorn at
  epsilon 0.01 needs ~1000 iterations, 4.6 s, measured on the 2-core machine).

  ``method="sinkhorn"`` is ott-jax at absolute ``epsilon``; ``"exact"`` is POT's network
  simplex on the host (a ``pure_callback``; under vmap one callback solves the batch's
  problems on parallel host threads).
  """
  if method == "sinkhorn":
    return core_ot.sinkhorn_coupling(x, y, a, b, epsilon=epsilon, threshold=threshold,
                                     max_iterations=max_iterations)
  if method == "exact":
    shape = jax.ShapeDtypeStruct((x.shape[0], y.shape[0]), x.dtype)
    if b is None:
      b = jnp.full((y.shape[0],), 1.0 / y.shape[0], x.dtype)
    return jax.pure_callback(_exact_plans_host, shape, x, y, a, b, vmap_method="broadcast_all")
  raise ValueError(f"ot method must be 'sinkhorn' or 'exact'; got {method!r}")


def ot_loss(x: jax.Array, log_w: jax.Array, y: jax.Array, *,
            target_weights: jax.Array | None = None, **plan_kwargs) -> jax.Array:
  """``sum_ij pi*_ij |x_i - y_j|^2`` with the plan held fixed (stop-gradient).

  Args:
    x: [n, d] particles; log_w: [n] their log-weights (normalised here); y: [m, d] data.
    target_weights: [m] data weights summing to 1 (default uniform; zeros mark padding).
    **plan_kwargs: passed to :func:`ot_plan`.

  Returns:
    Scalar loss; its gradient reaches ``x`` only (the plan is a constant, as in the paper).
  """
  chex.assert_rank([x, log_w, y], [2, 1, 2])
  chex.assert_equal_shape_prefix([x, log_w], 1)
  a = jax.nn.softmax(jax.lax.stop_gradient(log_w))
  plan = jax.lax.stop_gradient(
      ot_plan(jax.lax.stop_gradient(x), a, y, target_weights, **plan_kwargs))
  return jnp.sum(plan * squared_distances(x, y))


def nearest_counts(x: jax.Array, y: jax.Array, target_mask: jax.Array | None = None
                   ) -> jax.Array:
  """``c_i`` = number of rows of ``y: [m, d]`` whose nearest particle is ``x_i`` -> [n].

  ``target_mask: [m]`` (1 real, 0 padding) excludes padded rows.
  """
  nearest = jnp.argmin(squared_distances(y, jax.lax.stop_gradient(x)), axis=1)
  ones = jnp.ones(y.shape[0], x.dtype) if target_mask is None else target_mask.astype(x.dtype)
  return jnp.zeros(x.shape[0], x.dtype).at[nearest].add(ones)


def mass_loss(x: jax.Array, log_w: jax.Array, y: jax.Array, num_initial: int, *,
              target_mask: jax.Array | None = None) -> jax.Array:
  """``sum_i (w_i - c_i / N0)^2`` (local mass matching; total target N_{k+1}/N0 implicit)."""
  counts = nearest_counts(x, y, target_mask)
  return jnp.sum((jnp.exp(log_w) - counts / num_initial) ** 2)


def pinn_residual(
    velocity: PointField, growth: PointField, potential: PointField,
    t: ArrayLike, x: jax.Array, *, sigma: float, relative: bool = False,
) -> jax.Array:
  """Fokker-Planck-with-growth residual at ``(t, x_i)``, [n].

  ``r = d_t rho + div(v rho) - g rho`` with ``rho = exp(2 s / sigma^2)``. Written as
  ``rho * (2/sigma^2 (d_t s + v . grad s) + div v - g)`` so the exponential is taken once;
  ``relative=True`` returns the bracket (the residual divided by rho).
  """
  scale = 2.0 / sigma**2

  def single(xi):
    pt = lambda tt, z: potential(tt, z[None])[0]
    s, s_t = jax.jvp(lambda tt: pt(tt, xi), (jnp.asarray(t, xi.dtype),),
                     (jnp.ones((), xi.dtype),))
    grad_s = jax.grad(lambda z: pt(t, z))(xi)
    vel = lambda z: velocity(t, z[None])[0]
    v = vel(xi)
    div_v = jnp.trace(jax.jacfwd(vel)(xi))
    g = growth(t, xi[None])[0]
    bracket = scale * (s_t + v @ grad_s) + div_v - g
    return bracket if relative else jnp.exp(scale * s) * bracket

  return jax.vmap(single)(x)


def kde_density(x: jax.Array, centers: jax.Array, variance: float, scale: float = 1.0
                ) -> jax.Array:
  """``scale / M * sum_j N(x; c_j, variance I)`` at ``x: [n, d]`` -> [n]."""
  dim = x.shape[1]
  log_norm = -0.5 * dim * jnp.log(2 * jnp.pi * variance)
  log_k = log_norm - 0.5 * squared_distances(x, centers) / variance
  return scale * jnp.mean(jnp.exp(log_k), axis=1)


INITIAL_FORMS = ("log", "paper")


def initial_density_loss(potential: PointField, t0: float, x: jax.Array, target: jax.Array,
                         *, sigma: float, form: str = "log") -> jax.Array:
  """Initial-density term at the first snapshot ``x: [n, d]`` (anchors the level of s), [].

  With ``u_i = 2 s(t0, x_i) / sigma^2 - log p_i`` (the log-ratio of ``rho = exp(2 s /
  sigma^2)`` to the target ``p = target: [n]``):

  - ``form="paper"``: ``mean_i (rho_i - p_i)^2 = mean_i p_i^2 (exp(u_i) - 1)^2``, the
    paper's term. It grows like ``exp(2 u)``, i.e. ``exp(64 s)`` at sigma 0.25: a spread
    of s by 0.2 around its optimum multiplies rho by ~600, the SGD step explodes and
    float32 overflows (``exp(u) = inf`` from ``s ~ 2.8``), which is what drove stage 4 to
    NaN on the gene data.
  - ``form="log"`` (default): ``mean_i p_i^2 u_i^2``, evaluated in log space (``u`` never
    exponentiated). Same minimiser (``rho = p``), same value, gradient and curvature at
    it to second order (``exp(u) - 1 = u + O(u^2)``), but quadratic instead of
    exponential away from it, so the term and its gradient stay finite and bounded by
    the size of ``u``.
  """
  if form not in INITIAL_FORMS:
    raise ValueError(f"form must be one of {INITIAL_FORMS}, got {form!r}")
  log_p = jnp.log(target)
  u = 2.0 * potential(t0, x) / sigma**2 - log_p
  if form == "paper":
    return jnp.mean(target**2 * jnp.expm1(u) ** 2)
  return jnp.mean(target**2 * u**2)


def bridge_sample(x0, x1, t0, t1, tau, eps, sigma):
  """Brownian-bridge point between paired ``x0, x1: [n, d]`` at fraction ``tau: [n]``.

  ``x = tau x1 + (1 - tau) x0 + sigma_t eps``, ``sigma_t = sigma sqrt((t1 - t0) tau (1 - tau))``
  (for unit intervals this is SF2M's ``sigma sqrt(t (1 - t))``).

  Returns:
    ``(x [n, d], t [n], sigma_t [n])`` with ``t = t0 + tau (t1 - t0)``.
  """
  length = t1 - t0
  sigma_t = sigma * jnp.sqrt(length * tau * (1.0 - tau))
  x = tau[:, None] * x1 + (1.0 - tau[:, None]) * x0 + sigma_t[:, None] * eps
  return x, t0 + tau * length, sigma_t


def score_matching_loss(potential: PointField, x0, x1, t0, t1, tau, eps, *, sigma: float
                        ) -> jax.Array:
  """SF2M score matching for the potential ``s`` on OT-paired bridges.

  The conditional score of the bridge is ``-eps / sigma_t``; with
  ``grad log rho = 2/sigma^2 grad s`` and SF2M's weight ``lambda_t = 2 sigma_t / sigma^2``
  the loss is ``mean (lambda_t grad s(t, x_t) + eps)^2``.

  Args:
    potential: ``(t: [n], x: [n, d]) -> [n]``.
    x0, x1: [n, d] paired endpoints; t0, t1: interval ends; tau: [n] in (0, 1);
      eps: [n, d] standard normal; sigma: diffusion.
  """
  x, t, sigma_t = bridge_sample(x0, x1, t0, t1, tau, eps, sigma)
  grad_s = potential_gradient(potential, t, x)
  weight = 2.0 * sigma_t / sigma**2
  return jnp.mean((weight[:, None] * grad_s + eps) ** 2)
