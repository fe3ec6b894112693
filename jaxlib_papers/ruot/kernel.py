"""DeepRUOT's training stages: the equations of ``losses.py`` composed with the core blocks.

``make_flow_stage`` (stages 1, 2, 4) and ``make_score_stage`` (stage 3) return
``core.contract.TrainKernel`` objects (``init``, ``train_step``) for ``core.stages``. A
``train_step`` is several passes or steps (``blocks.scan_steps``) of every seed
(``blocks.vmap_members``: a leading seed axis on every state leaf, so N seeds train in one
compiled program, N / D on each of D devices when the launcher's mesh has D dividing N:
``split=True``, each device solving its own seeds' exact plans); the flow stages keep the
params of their best pass (``blocks.keep_best``) and stage 3 is a ``blocks.gradient_step``.
A flow pass walks the intervals between snapshots in one ``lax.scan`` (:func:`flow_pass`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlib_papers.core import blocks, contract, prng
from jaxlib_papers.ruot.losses import (
  INITIAL_FORMS,
  PointField,
  initial_density_loss,
  nearest_counts,
  ot_plan,
  padded_intervals,
  pinn_residual,
  score_matching_loss,
  squared_distances,
  weighted_flow,
  weighted_flow_with_action,
)
from jaxlib_papers.ruot.models import Networks, Params

# ----------------------------------------------------------------------------------------
# Training stages.


class FlowState(NamedTuple):
  """Stages 1, 2 and 4 (every leaf has a leading seed axis [S])."""
  step: jax.Array         # [S] int32, passes done
  params: Params          # {"v", "g", "s"} network params
  opt_state: Any          # optax state
  best: blocks.Best       # params of the pass with the lowest monitored OT loss
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


class FlowStageSettings(NamedTuple):
  """Static settings of a particle-flow stage (stage 1: v, g; 2: v; 4: all, + energy/PINN).

  Attributes:
    trainable: names among "v", "g", "s" that the stage updates (the others are frozen).
    weights: loss weights.
    optimizer, lr: "adam" | "sgd" and its step size.
    total_passes: passes (optimiser steps) in the stage, a multiple of passes_per_step;
      passes_per_step: passes per ``train_step`` call.
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


class FlowProblem(NamedTuple):
  """What a flow stage's passes read besides the state: the networks and the snapshots."""
  nets: Networks
  x_first: jax.Array               # [N0, d] the first snapshot (every pass starts there)
  t_first: float                   # its time
  intervals: tuple[jax.Array, ...]  # (grids, targets, masks, t_ends): padded_intervals
  initial_target: jax.Array | None  # [N0] density target of the initial-density term


def _fields(nets: Networks, params: Params) -> tuple[PointField, PointField, PointField]:
  """(v, g, s) of ``params`` as functions of ``(t, x)``."""
  return ((lambda t, x: nets.velocity(params, t, x)),
          (lambda t, x: nets.growth(params, t, x)),
          (lambda t, x: nets.potential(params, t, x)))


def flow_end_gradient(problem: FlowProblem, settings: FlowStageSettings, params: Params,
                      start: tuple[jax.Array, jax.Array], interval: tuple[jax.Array, ...]):
  """OT + mass (+ energy) loss of one interval and its gradient through the flow.

  The OT plan and the nearest-particle counts are constants of the loss, so they are
  computed from the forward particles outside differentiation: the flow is linearised
  once (``jax.vjp``), the end-point loss is differentiated w.r.t. the particles, and the
  two are chained. Same gradient as differentiating the whole loss with a stop-gradient
  plan, but the Sinkhorn solver is never traced under autodiff.

  Args:
    start: ``(x0 [n, d], log_w0 [n])`` at the interval's start.
    interval: ``(grid [S+1], y [M, d], mask [M], t_end [])`` of :func:`padded_intervals`.

  Returns:
    ``(total [], (x1 [n, d], log_w1 [n], parts), grads)``.
  """
  weights, sigma, method = settings.weights, settings.sigma, settings.method
  x0, log_w0 = start
  grid, y, mask, _ = interval
  num_initial = int(problem.x_first.shape[0])

  def flow(p):
    v, g, s = _fields(problem.nets, p)
    if weights.energy:
      return weighted_flow_with_action((v, g, s), x0, log_w0, grid, sigma=sigma,
                                       alpha=settings.alpha, method=method)
    x1, log_w1 = weighted_flow(v, g, x0, log_w0, grid, method=method)
    return x1, log_w1, jnp.zeros_like(log_w1)

  (x1, log_w1, action), flow_vjp = jax.vjp(flow, params)
  # Padded targets carry zero weight in the plan and in the nearest-particle counts.
  plan = ot_plan(x1, jax.nn.softmax(log_w1), y, mask / jnp.sum(mask),
                 **dict(settings.ot_kwargs or {}))
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
  return total, (x1, log_w1, parts), grads


def field_loss(problem: FlowProblem, settings: FlowStageSettings, params: Params,
               interval: tuple[jax.Array, ...]) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The PINN residual at the interval's target cells and the initial-density term.

  Returns:
    ``(weighted sum [], {"pinn": [], "initial": []})`` (each only when its weight is set).
  """
  weights, sigma = settings.weights, settings.sigma
  _, y, mask, t_end = interval
  v, g, s = _fields(problem.nets, params)
  extra, terms = jnp.zeros(()), {}
  if weights.pinn:
    residual = pinn_residual(v, g, s, t_end, y, sigma=sigma, relative=settings.pinn_relative)
    terms["pinn"] = jnp.sum(jnp.where(mask > 0, jnp.abs(residual), 0.0)) / jnp.sum(mask)
    extra = extra + weights.pinn * terms["pinn"]
  if weights.initial:
    terms["initial"] = initial_density_loss(s, problem.t_first, problem.x_first,
                                            problem.initial_target, sigma=sigma,
                                            form=settings.initial_form)
    extra = extra + weights.initial * terms["initial"]
  return extra, terms


def interval_gradient(problem: FlowProblem, settings: FlowStageSettings, params: Params,
                      start: tuple[jax.Array, jax.Array], interval: tuple[jax.Array, ...]):
  """Loss and gradient of one interval: :func:`flow_end_gradient` + :func:`field_loss`.

  Returns:
    ``(total [], (x1 [n, d], log_w1 [n], parts), grads)``.
  """
  total, (x1, log_w1, parts), grads = flow_end_gradient(problem, settings, params, start,
                                                        interval)
  if settings.weights.pinn or settings.weights.initial:
    (extra, terms), extra_grads = jax.value_and_grad(
        lambda p: field_loss(problem, settings, p, interval), has_aux=True)(params)
    grads = jax.tree.map(jnp.add, grads, extra_grads)
    total = total + extra
    parts = {**parts, **terms}
  return total, (x1, log_w1, parts), grads


def apply_gradients(tx: optax.GradientTransformation, params: Params, opt_state: Any,
                    grads: Params) -> tuple[Params, Any]:
  """One optimiser update from given gradients.

  ``blocks.gradient_step`` differentiates a loss function; a flow interval's gradient is
  assembled by hand instead (:func:`interval_gradient`: a vjp through the flow chained with
  a constant OT plan, plus the field terms), so only its update half is needed here.
  """
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state


def flow_pass(problem: FlowProblem, settings: FlowStageSettings,
              tx: optax.GradientTransformation, state: FlowState
              ) -> tuple[FlowState, dict[str, jax.Array]]:
  """One pass of one seed: the intervals in order from the first snapshot (``w = 1/N0``).

  Each interval integrates from the (stop-gradient) end of the previous one. With
  ``settings.sequential_updates`` each interval takes its own optimizer step (paper);
  otherwise the interval gradients are summed into one step per pass.
  """
  num_initial = int(problem.x_first.shape[0])
  log_w = jnp.full((num_initial,), -jnp.log(float(num_initial)), jnp.float32)
  zero_grads = jax.tree.map(jnp.zeros_like, state.params)

  def interval(carry, inputs):
    params, opt_state, x, log_w, grads_sum = carry
    total, (x, log_w, parts), grads = interval_gradient(problem, settings, params,
                                                        (x, log_w), inputs)
    if settings.sequential_updates:
      params, opt_state = apply_gradients(tx, params, opt_state, grads)
    else:
      grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
    x, log_w = jax.lax.stop_gradient(x), jax.lax.stop_gradient(log_w)
    return (params, opt_state, x, log_w, grads_sum), (total, parts)

  carry = (state.params, state.opt_state, problem.x_first, log_w, zero_grads)
  (params, opt_state, _, _, grads_sum), (totals, parts) = jax.lax.scan(
      interval, carry, problem.intervals)
  if not settings.sequential_updates:
    params, opt_state = apply_gradients(tx, params, opt_state, grads_sum)
  monitor = parts["ot"][-1]
  best = blocks.keep_best(state.best, params, monitor)
  return (FlowState(state.step + 1, params, opt_state, best, state.key),
          flow_metrics(settings, totals, parts))


def flow_metrics(settings: FlowStageSettings, totals: jax.Array,
                 parts: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
  """A pass's metrics from its per-interval totals and parts (each [K-1])."""
  metrics = {"loss": jnp.mean(totals), "ot_last": parts["ot"][-1],
             "mass_total": jnp.sum(parts["mass"])}
  for name in ("pinn", "initial"):
    if name in parts:
      metrics[name] = jnp.mean(parts[name])
  if settings.weights.energy:
    metrics["energy"] = jnp.mean(parts["energy"])
  return metrics


def _within(step: jax.Array, total: int, new: Any, old: Any) -> Any:
  """``new`` while ``step < total``, else ``old``: a step past the stage's length is a no-op.

  The stages' lengths are multiples of their steps per call, so this never holds a step
  back in ``core.stages``; it keeps a kernel called past its length (a benchmark, a test)
  in place, and the select keeps the compiled step, and so its float rounding, as it was
  before the blocks (dropping it changes XLA's fusion: stage 3's params moved by 1 ulp).
  """
  return blocks.where_tree(step < total, new, old)


def _check_flow_stage(times, xs, settings: FlowStageSettings, initial_target) -> None:
  if len(times) != len(xs) or len(times) < 2:
    raise ValueError(f"need >= 2 training times with one array each; got {len(times)} "
                     f"times and {len(xs)} arrays")
  if settings.passes_per_step < 1 or settings.total_passes < 0:
    raise ValueError("passes_per_step must be >= 1 and total_passes >= 0")
  if settings.weights.initial and initial_target is None:
    raise ValueError("weights.initial > 0 needs initial_target")
  if settings.initial_form not in INITIAL_FORMS:
    raise ValueError(f"initial_form must be one of {INITIAL_FORMS}, got "
                     f"{settings.initial_form!r}")


def _member_init(tx: optax.GradientTransformation, initial_params: Params
                 ) -> Callable[[jax.Array], Any]:
  """``init(key)`` of every seed: seed ``r`` starts from ``initial_params[r]``."""
  leaves, treedef = jax.tree.flatten(initial_params)

  def init_member(key, *member_leaves):
    params = jax.tree.unflatten(treedef, member_leaves)
    return key, params, tx.init(params)

  return blocks.vmap_init(init_member, int(leaves[0].shape[0]), *leaves)


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

  A train step is ``settings.passes_per_step`` passes (:func:`flow_pass`, scanned) of
  every seed (vmapped; split over the devices of the mesh it is traced under when their
  count divides the seeds), each pass scoring ``weights.ot * L_OT + weights.mass * L_mass``
  (+ energy, PINN, initial density when their weights are non-zero) per interval and
  keeping the params of the lowest last-interval OT loss (``state.best``).

  Args:
    nets: the networks.
    times: [K] training times; xs: K arrays [n_k, d] of training data.
    initial_params: params with a leading seed axis [S] (the previous stage's result).
    settings: a :class:`FlowStageSettings`.
    initial_target: [n_0] density target at the first snapshot for the initial term.

  Returns:
    A :class:`~jaxlib_papers.core.contract.TrainKernel` over :class:`FlowState`
    (``train_step(state, None)``: ``passes_per_step`` passes of every seed; metrics of the
    last pass, averaged over seeds, and ``loss_max`` over seeds).
  """
  _check_flow_stage(times, xs, settings, initial_target)
  problem = FlowProblem(nets, jnp.asarray(xs[0], jnp.float32), float(times[0]),
                        padded_intervals(times, xs, settings.dt, settings.equal_steps),
                        initial_target)
  one_seed_params = jax.tree.map(lambda a: a[0], initial_params)
  tx = make_optimizer(one_seed_params, settings.trainable, settings.optimizer, settings.lr)
  member_init = _member_init(tx, initial_params)

  def init(key: jax.Array) -> FlowState:
    keys, params, opt_state = member_init(key)
    return FlowState(jnp.zeros(keys.shape, jnp.int32), params, opt_state,
                     jax.vmap(blocks.init_best)(params), keys)

  def one_pass(state: FlowState, _) -> tuple[FlowState, dict[str, jax.Array]]:
    new, metrics = flow_pass(problem, settings, tx, state)
    return _within(state.step, settings.total_passes, new, state), metrics

  step = blocks.vmap_members(
      blocks.scan_steps(one_pass, settings.passes_per_step, metrics="last"),
      rules={"loss": ("mean", "max")}, split=True)
  return contract.train_kernel(init, lambda state, batch=None: step(state, None))


class ScoreStageSettings(NamedTuple):
  """Stage 3: Adam step size, steps (a multiple of steps_per_call), bridge diffusion."""
  lr: float
  total_steps: int
  steps_per_call: int
  sigma: float


def score_loss(nets: Networks, times: tuple[jax.Array, jax.Array], sigma: float,
               params: Params, x0: jax.Array, x1: jax.Array, key: jax.Array) -> jax.Array:
  """Score-matching loss of one seed over every interval, [].

  Args:
    times: ``(t0s [K-1], t1s [K-1])`` the interval ends.
    x0, x1: [K-1, n, d] OT-paired particles at the interval ends; key: bridge times, noise.
  """
  t0s, t1s = times
  k_tau, k_eps = jax.random.split(key)
  tau = prng.uniform(k_tau, x0.shape[:2], x0.dtype)
  eps = prng.normal(k_eps, x0.shape, x0.dtype)
  potential = lambda t, x: nets.potential(params, t, x)
  per_interval = jax.vmap(
      lambda a, b, ta, tb, tu, e: score_matching_loss(potential, a, b, ta, tb, tu, e,
                                                      sigma=sigma))
  return jnp.mean(per_interval(x0, x1, t0s, t1s, tau, eps))


def score_step(update: Callable[..., blocks.Update], total_steps: int, state: ScoreState,
               paired: tuple[jax.Array, jax.Array]) -> tuple[ScoreState, dict[str, jax.Array]]:
  """One Adam step of one seed on fresh bridge times and noise (none past ``total_steps``)."""
  key, sub = jax.random.split(state.key)
  up = update(state.params, state.opt_state, *paired, sub)
  new = ScoreState(state.step + 1, up.params, up.opt_state, key)
  return _within(state.step, total_steps, new, state), {"loss": up.loss}


def make_score_stage(
    nets: Networks,
    times: Sequence[float],
    paired: tuple[jax.Array, jax.Array],
    initial_params: Params,
    settings: ScoreStageSettings,
) -> contract.TrainKernel:
  """Kernel of stage 3: SF2M score matching of ``s`` on OT-paired ODE trajectories.

  Args:
    nets: the networks.
    times: [K] the interval ends.
    paired: ``(x_start, x_end)``, each ``[S, K - 1, n, d]``: per seed and interval the
      ODE particles at ``times[k]`` and their exact-OT partners at ``times[k + 1]``.
    initial_params: [S]-stacked params (only ``s`` is trained).
    settings: a :class:`ScoreStageSettings`.

  Returns:
    A :class:`~jaxlib_papers.core.contract.TrainKernel` over :class:`ScoreState`
    (``train_step(state, None)``: ``steps_per_call`` steps of every seed; loss averaged
    over the steps, then over seeds, and ``loss_max`` over seeds).
  """
  x_start, x_end = (jnp.asarray(p, jnp.float32) for p in paired)
  if x_start.shape != x_end.shape or x_start.ndim != 4:
    raise ValueError(f"paired arrays must both be [S, K-1, n, d]; got {x_start.shape}, "
                     f"{x_end.shape}")
  interval_ends = (jnp.asarray(times[:-1], jnp.float32), jnp.asarray(times[1:], jnp.float32))
  one_seed_params = jax.tree.map(lambda a: a[0], initial_params)
  tx = make_optimizer(one_seed_params, ("s",), "adam", settings.lr)
  update = blocks.gradient_step(
      functools.partial(score_loss, nets, interval_ends, settings.sigma), tx)
  member_init = _member_init(tx, initial_params)

  def init(key: jax.Array) -> ScoreState:
    keys, params, opt_state = member_init(key)
    return ScoreState(jnp.zeros(keys.shape, jnp.int32), params, opt_state, keys)

  step = blocks.vmap_members(
      blocks.scan_steps(functools.partial(score_step, update, settings.total_steps),
                        settings.steps_per_call),
      batch_axis=0, rules={"loss": ("mean", "max")}, split=True)
  return contract.train_kernel(init, lambda state, batch=None: step(state, (x_start, x_end)))
