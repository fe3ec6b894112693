"""DeepRUOT kernels: weighted-particle flow, per-interval losses, score matching, stages.

Math (Zhang, Li, Zhou, ICLR 2025). The regularised unbalanced OT problem over densities
with growth is solved in the reformulation ``v = b - sigma^2/2 grad log rho``,
``s = sigma^2/2 log rho``, which makes the density obey ``d_t rho + div(v rho) = g rho``.
Its action is

    int int [ 1/2 |v|^2 + 1/2 |grad s|^2 - s g - 1/2 sigma^2 g + alpha g^2 ] rho dx dt.

The density is carried by weighted particles: ``dx/dt = v(t, x)``, ``d ln w/dt = g(t, x)``,
``w(0) = 1/N0``, so ``sum_i w_i(t)`` is the mass relative to the first snapshot.

Everything here is a pure function. ``make_flow_stage`` and ``make_score_stage`` return
``core.contract.TrainKernel`` objects (``init``, ``train_step``) for ``core.train_loop``; a
``train_step`` is a ``lax.scan`` over several passes, and every state leaf carries a leading
seed axis so N seeds train in one compiled program (``jax.vmap``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxlib_papers.core import contract, prng, sde
from jaxlib_papers.core import ot as core_ot
from jaxlib_papers.ruot.models import Networks, Params

PointField = Callable[[jax.Array, jax.Array], jax.Array]  # (t, x: [n, d]) -> [n, ...]


# ----------------------------------------------------------------------------------------
# Integrators.


def time_grid(t0: float, t1: float, dt: float) -> np.ndarray:
  """Fixed-step grid from ``t0`` to ``t1`` with step close to ``dt`` (at least one step)."""
  if dt <= 0:
    raise ValueError(f"dt must be > 0; got {dt}")
  num = max(1, int(round(abs(t1 - t0) / dt)))
  return np.linspace(t0, t1, num + 1)


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
    velocity: PointField,
    growth: PointField,
    potential: PointField,
    x0: jax.Array,
    log_w0: jax.Array,
    ts: ArrayLike,
    *,
    sigma: float,
    alpha: float = 1.0,
    method: str = "euler",
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Weighted flow plus the accumulated action ``m_i = int L(t, x_i) w_i dt``.

  Returns:
    ``(x [n, d], log_w [n], action [n])`` at ``ts[-1]``; ``sum(action)`` is the path action
    of the mass carried by the particles.
  """

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
  simplex on the host (a ``pure_callback``, sequential under vmap).
  """
  if method == "sinkhorn":
    return core_ot.sinkhorn_coupling(x, y, a, b, epsilon=epsilon, threshold=threshold,
                                     max_iterations=max_iterations)
  if method == "exact":
    shape = jax.ShapeDtypeStruct((x.shape[0], y.shape[0]), x.dtype)
    if b is None:
      b = jnp.full((y.shape[0],), 1.0 / y.shape[0], x.dtype)
    return jax.pure_callback(_exact_plan_host, shape, x, y, a, b, vmap_method="sequential")
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


# ----------------------------------------------------------------------------------------
# Training stages.


class FlowState(NamedTuple):
  """Stages 1, 2 and 4 (every leaf has a leading seed axis [S])."""
  step: jax.Array         # [S] int32, passes done
  params: Params          # {"v", "g", "s"} network params
  opt_state: Any          # optax state
  best_params: Params     # params of the pass with the lowest monitored OT loss
  best_loss: jax.Array    # [S] float32
  key: jax.Array          # [S] typed PRNG keys (unused by the deterministic stages)


class ScoreState(NamedTuple):
  """Stage 3 (leading seed axis [S])."""
  step: jax.Array         # [S] int32
  params: Params
  opt_state: Any
  key: jax.Array          # [S] typed PRNG keys for bridge times and noise


class FlowLossWeights(NamedTuple):
  ot: float = 0.1
  mass: float = 1.0
  energy: float = 0.0
  pinn: float = 0.0
  initial: float = 0.0


def _labels(params: Params, trainable: Sequence[str]) -> Params:
  return {name: jax.tree.map(lambda _, label=("train" if name in trainable else "freeze"):
                              label, sub)
          for name, sub in params.items()}


def make_optimizer(params_like: Params, trainable: Sequence[str], optimizer: str, lr: float
                   ) -> optax.GradientTransformation:
  """Adam or SGD on the ``trainable`` networks; the others are frozen (zero updates)."""
  if optimizer == "adam":
    inner = optax.adam(lr)
  elif optimizer == "sgd":
    inner = optax.sgd(lr)
  else:
    raise ValueError(f"optimizer must be 'adam' or 'sgd'; got {optimizer!r}")
  return optax.multi_transform({"train": inner, "freeze": optax.set_to_zero()},
                               _labels(params_like, trainable))


def _select(active, new, old):
  return jax.tree.map(lambda a, b: jnp.where(active, a, b), new, old)


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


class FlowStageSettings(NamedTuple):
  """Static settings of a particle-flow stage (stage 1: v, g; 2: v; 4: all, + energy/PINN).

  Attributes:
    trainable: names among "v", "g", "s" that the stage updates (the others are frozen).
    weights: loss weights.
    optimizer, lr: "adam" | "sgd" and its step size.
    total_passes: passes in the stage; passes_per_step: passes per ``train_step`` call.
    dt: Euler step of the particle ODE.
    sigma, alpha: diffusion and growth penalty of the action (paper: sigma, alpha).
    ot_kwargs: passed to :func:`ot_plan` (method, epsilon, ...).
    pinn_relative: use the PINN residual divided by rho (finite whatever the level of s;
      the absolute residual carries the factor ``rho = exp(2 s / sigma^2)``).
    initial_form: "log" (stable, default) | "paper"; see :func:`initial_density_loss`.
    sequential_updates: one optimizer step per interval (paper) or per pass.
    track_best: keep the params with the lowest last-interval OT loss (paper's selection).
    method: ODE scheme.
    equal_steps: same step count in every interval (see :func:`padded_intervals`).
  """

  trainable: tuple[str, ...]
  weights: FlowLossWeights
  optimizer: str = "adam"
  lr: float = 1e-3
  total_passes: int = 1
  passes_per_step: int = 1
  dt: float = 0.01
  sigma: float = 0.25
  alpha: float = 1.0
  ot_kwargs: Mapping[str, Any] | None = None
  pinn_relative: bool = False
  initial_form: str = "log"
  sequential_updates: bool = True
  track_best: bool = True
  method: str = "euler"
  equal_steps: bool = False


def make_flow_stage(
    nets: Networks,
    times: Sequence[float],
    xs: Sequence[jax.Array],
    initial_params: Params,
    settings: FlowStageSettings,
    *,
    initial_target: jax.Array | None = None,
) -> contract.TrainKernel:
  """Kernel of a particle-flow stage (stage 1: v, g; stage 2: v; stage 4: all, + energy/PINN).

  One *pass* starts the particles at the first snapshot (``w = 1/N0``) and walks the
  intervals in order (a ``lax.scan`` over the padded intervals); each interval integrates
  from the (stop-gradient) end of the previous one and scores
  ``weights.ot * L_OT + weights.mass * L_mass`` (+ energy, PINN, initial density when their
  weights are non-zero) against the next snapshot. With ``settings.sequential_updates``
  each interval takes its own optimizer step, as the paper does; otherwise the interval
  gradients are summed into one step per pass.

  Args:
    nets: the networks.
    times: [K] training times; xs: K arrays [n_k, d] of training data.
    initial_params: params with a leading seed axis [S] (the previous stage's result).
    settings: a :class:`FlowStageSettings`.
    initial_target: [n_0] density target at the first snapshot for the initial term.

  Returns:
    A :class:`~jaxlib_papers.core.contract.TrainKernel` over :class:`FlowState`
    (``train_step(state, None)``: ``passes_per_step`` passes of every seed).
  """
  (trainable, weights, optimizer, lr, total_passes, passes_per_step, dt, sigma, alpha,
   ot_kwargs, pinn_relative, initial_form, sequential_updates, track_best, method,
   equal_steps) = settings
  if len(times) != len(xs) or len(times) < 2:
    raise ValueError(f"need >= 2 training times with one array each; got {len(times)} "
                     f"times and {len(xs)} arrays")
  if passes_per_step < 1 or total_passes < 0:
    raise ValueError("passes_per_step must be >= 1 and total_passes >= 0")
  if weights.initial and initial_target is None:
    raise ValueError("weights.initial > 0 needs initial_target")
  if initial_form not in INITIAL_FORMS:
    raise ValueError(f"initial_form must be one of {INITIAL_FORMS}, got {initial_form!r}")
  ot_kwargs = dict(ot_kwargs or {})
  x_first = jnp.asarray(xs[0], jnp.float32)
  num_initial = int(x_first.shape[0])
  grids, targets, masks, t_ends = padded_intervals(times, xs, dt, equal_steps)
  t_first = float(times[0])
  one_seed_params = jax.tree.map(lambda a: a[0], initial_params)
  tx = make_optimizer(one_seed_params, trainable, optimizer, lr)
  num_seeds = int(jax.tree.leaves(initial_params)[0].shape[0])

  def interval_step(params, x0, log_w0, grid, y, mask, t_end):
    """Loss and gradient of one interval.

    The OT plan and the nearest-particle counts are constants of the loss, so they are
    computed from the forward particles outside differentiation: the flow is linearised
    once (``jax.vjp``), the end-point loss is differentiated w.r.t. the particles, and the
    two are chained. Same gradient as differentiating the whole loss with a stop-gradient
    plan, but the Sinkhorn solver is never traced under autodiff.
    """
    v = lambda p: (lambda t, x: nets.velocity(p, t, x))
    g = lambda p: (lambda t, x: nets.growth(p, t, x))
    s = lambda p: (lambda t, x: nets.potential(p, t, x))

    def flow(p):
      if weights.energy:
        return weighted_flow_with_action(v(p), g(p), s(p), x0, log_w0, grid, sigma=sigma,
                                         alpha=alpha, method=method)
      x1, log_w1 = weighted_flow(v(p), g(p), x0, log_w0, grid, method=method)
      return x1, log_w1, jnp.zeros_like(log_w1)

    (x1, log_w1, action), flow_vjp = jax.vjp(flow, params)
    # Padded targets carry zero weight in the plan and in the nearest-particle counts.
    plan = ot_plan(x1, jax.nn.softmax(log_w1), y, mask / jnp.sum(mask), **ot_kwargs)
    counts = nearest_counts(x1, y, mask)

    def end_loss(x, log_w, act):
      parts = {"ot": jnp.sum(plan * squared_distances(x, y)),
               "mass": jnp.sum((jnp.exp(log_w) - counts / num_initial) ** 2),
               "energy": jnp.mean(act)}  # the paper averages the per-particle action
      total = (weights.ot * parts["ot"] + weights.mass * parts["mass"]
               + weights.energy * parts["energy"])
      return total, parts

    (total, parts), cotangents = jax.value_and_grad(end_loss, argnums=(0, 1, 2),
                                                    has_aux=True)(x1, log_w1, action)
    (grads,) = flow_vjp(cotangents)

    if weights.pinn or weights.initial:
      def field_loss(p):
        extra, terms = jnp.zeros(()), {}
        if weights.pinn:
          residual = pinn_residual(v(p), g(p), s(p), t_end, y, sigma=sigma,
                                   relative=pinn_relative)
          terms["pinn"] = jnp.sum(jnp.where(mask > 0, jnp.abs(residual), 0.0)) / jnp.sum(mask)
          extra = extra + weights.pinn * terms["pinn"]
        if weights.initial:
          terms["initial"] = initial_density_loss(s(p), t_first, x_first, initial_target,
                                                  sigma=sigma, form=initial_form)
          extra = extra + weights.initial * terms["initial"]
        return extra, terms

      (extra, terms), extra_grads = jax.value_and_grad(field_loss, has_aux=True)(params)
      grads = jax.tree.map(jnp.add, grads, extra_grads)
      total = total + extra
      parts = {**parts, **terms}
    return total, (x1, log_w1, parts), grads

  def one_pass(state: FlowState) -> tuple[FlowState, dict[str, jax.Array]]:
    log_w = jnp.full((num_initial,), -jnp.log(float(num_initial)), jnp.float32)
    zero_grads = jax.tree.map(jnp.zeros_like, state.params)

    def interval(carry, inputs):
      params, opt_state, x, log_w, grads_sum = carry
      total, (x, log_w, parts), grads = interval_step(params, x, log_w, *inputs)
      if sequential_updates:
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
      else:
        grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
      x, log_w = jax.lax.stop_gradient(x), jax.lax.stop_gradient(log_w)
      return (params, opt_state, x, log_w, grads_sum), (total, parts)

    carry = (state.params, state.opt_state, x_first, log_w, zero_grads)
    (params, opt_state, _, _, grads_sum), (totals, parts) = jax.lax.scan(
        interval, carry, (grids, targets, masks, t_ends))
    if not sequential_updates:
      updates, opt_state = tx.update(grads_sum, opt_state, params)
      params = optax.apply_updates(params, updates)
    monitor = parts["ot"][-1]
    better = monitor < state.best_loss
    best_params = _select(better, params, state.best_params) if track_best else params
    best_loss = jnp.where(better, monitor, state.best_loss)
    metrics = {"loss": jnp.mean(totals), "ot_last": monitor, "mass_total": jnp.sum(parts["mass"])}
    for name in ("pinn", "initial"):
      if name in parts:
        metrics[name] = jnp.mean(parts[name])
    if weights.energy:
      metrics["energy"] = jnp.mean(parts["energy"])
    new = FlowState(state.step + 1, params, opt_state, best_params, best_loss, state.key)
    return new, metrics

  def step_one_seed(state: FlowState, _):
    def body(carry, _):
      new, metrics = one_pass(carry)
      active = carry.step < total_passes  # the last call may hold fewer passes
      return _select(active, new, carry), metrics
    state, metrics = jax.lax.scan(body, state, None, length=passes_per_step)
    return state, jax.tree.map(lambda m: m[-1], metrics)

  def init(key: jax.Array) -> FlowState:
    keys = jax.random.split(key, num_seeds)
    params = initial_params
    return FlowState(
        step=jnp.zeros((num_seeds,), jnp.int32),
        params=params,
        opt_state=jax.vmap(tx.init)(params),
        best_params=params,
        best_loss=jnp.full((num_seeds,), jnp.inf, jnp.float32),
        key=keys)

  def train_step(state: FlowState, batch=None):
    del batch
    state, metrics = jax.vmap(step_one_seed)(state, None)
    out = {name: jnp.mean(value) for name, value in metrics.items()}
    out["loss_max_seed"] = jnp.max(metrics["loss"])
    return state, out

  return contract.train_kernel(init, train_step)


def make_score_stage(
    nets: Networks,
    times: Sequence[float],
    paired: tuple[jax.Array, jax.Array],
    initial_params: Params,
    *,
    lr: float,
    total_steps: int,
    steps_per_call: int,
    sigma: float,
) -> contract.TrainKernel:
  """Kernel of stage 3: SF2M score matching of ``s`` on OT-paired ODE trajectories.

  Args:
    nets: the networks.
    times: [K] the interval ends.
    paired: ``(x_start, x_end)``, each ``[S, K - 1, n, d]``: per seed and interval the
      ODE particles at ``times[k]`` and their exact-OT partners at ``times[k + 1]``.
    initial_params: [S]-stacked params (only ``s`` is trained).
    lr: Adam step size; total_steps: steps in the stage; steps_per_call: per train_step.
    sigma: diffusion of the bridges.
  """
  x_start, x_end = (jnp.asarray(p, jnp.float32) for p in paired)
  if x_start.shape != x_end.shape or x_start.ndim != 4:
    raise ValueError(f"paired arrays must both be [S, K-1, n, d]; got {x_start.shape}, "
                     f"{x_end.shape}")
  t0s = jnp.asarray(times[:-1], jnp.float32)
  t1s = jnp.asarray(times[1:], jnp.float32)
  num_seeds = x_start.shape[0]
  one_seed_params = jax.tree.map(lambda a: a[0], initial_params)
  tx = make_optimizer(one_seed_params, ("s",), "adam", lr)

  def loss_fn(params, x0, x1, key):
    k_tau, k_eps = jax.random.split(key)
    tau = prng.uniform(k_tau, x0.shape[:2], x0.dtype)
    eps = prng.normal(k_eps, x0.shape, x0.dtype)
    potential = lambda t, x: nets.potential(params, t, x)
    per_interval = jax.vmap(
        lambda a, b, ta, tb, tu, e: score_matching_loss(potential, a, b, ta, tb, tu, e,
                                                        sigma=sigma))
    return jnp.mean(per_interval(x0, x1, t0s, t1s, tau, eps))

  def step_one_seed(state: ScoreState, data):
    x0, x1 = data

    def body(carry, _):
      key, sub = jax.random.split(carry.key)
      loss, grads = jax.value_and_grad(loss_fn)(carry.params, x0, x1, sub)
      updates, opt_state = tx.update(grads, carry.opt_state, carry.params)
      new = ScoreState(carry.step + 1, optax.apply_updates(carry.params, updates), opt_state,
                       key)
      return _select(carry.step < total_steps, new, carry), loss

    state, losses = jax.lax.scan(body, state, None, length=steps_per_call)
    return state, jnp.mean(losses)

  def init(key: jax.Array) -> ScoreState:
    return ScoreState(jnp.zeros((num_seeds,), jnp.int32), initial_params,
                      jax.vmap(tx.init)(initial_params), jax.random.split(key, num_seeds))

  def train_step(state: ScoreState, batch=None):
    del batch
    state, losses = jax.vmap(step_one_seed)(state, (x_start, x_end))
    return state, {"loss": jnp.mean(losses), "loss_max_seed": jnp.max(losses)}

  return contract.train_kernel(init, train_step)
