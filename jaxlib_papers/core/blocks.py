"""The blocks of a training program: pure transformations that compose (after optax).

A method's kernel is its paper's loss plus a few of these, the way optax's ``adam`` is
``chain(scale_by_adam, scale_by_learning_rate)``. Each block is a pure function; none jits
(the loop or the caller does), so a test can run any composition eagerly and jitted.

* :func:`gradient_step`: ``value_and_grad -> tx.update -> apply_updates`` once, returning
  an :class:`Update` (new params, optimiser state, loss, aux, gradients).
* :func:`ema_update`: an exponential moving average of parameters.
* :func:`scan_steps`: ``k`` steps of a ``step(state, batch) -> (state, metrics)`` as one
  ``lax.scan`` (``k`` optimiser steps per compiled call), with the batch shared or sliced.
* :func:`vmap_members` / :func:`vmap_init`: a leading axis of *members* (seeds, or numeric
  variants such as FSBM's tau or CCA's lambda) trained in one program, batched under
  ``vmap`` or one after another (``sequential``); per-member metrics reduced to scalars by
  a declared rule.
* :func:`vmap_partition`: members split into static groups, each group vmapped under its
  own step (a term that is switched off in some members is then not computed for them).
* :func:`keep_best` / :class:`Best`: the parameters at the best validation value so far,
  with a patience counter for early stopping.
* :func:`where_tree`: select between two pytrees leaf by leaf (a stopped member keeps its
  state).
* :func:`member_mapped_loss`: a loss whose value and gradient run one member at a time
  under ``vmap`` (``lax.map``; faster on XLA:CPU for a linear head's softmax cross-entropy).

Names: a *step* is ``step(state, batch) -> (state, metrics)``, ``metrics`` a dict of arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import affinity, distributed

PyTree = Any
Metrics = dict[str, jax.Array]
Step = Callable[[PyTree, PyTree], tuple[PyTree, Metrics]]

REDUCTIONS: Mapping[str, Callable[..., jax.Array]] = {
    "mean": jnp.mean, "max": jnp.max, "min": jnp.min, "sum": jnp.sum,
    "last": lambda x, axis=0: jnp.take(x, -1, axis=axis),
    "first": lambda x, axis=0: jnp.take(x, 0, axis=axis),
}


class Update(NamedTuple):
  """What one gradient step returns."""
  params: PyTree           # the parameters after the optimiser's update
  opt_state: PyTree        # the optimiser state after it
  loss: jax.Array          # [] the loss at the parameters before the update
  aux: Any                 # the loss function's auxiliary output (None without has_aux)
  grads: PyTree            # the gradients of the loss at the parameters before the update


def gradient_step(loss_fn: Callable[..., Any], tx: optax.GradientTransformation, *,
                  has_aux: bool = False) -> Callable[..., Update]:
  """One optimiser step on ``loss_fn``'s first argument.

  Args:
    loss_fn: ``loss_fn(params, *args) -> loss []`` or, with ``has_aux``,
      ``-> (loss [], aux)``.
    tx: the optax transformation (its ``update`` gets the parameters, for weight decay).
    has_aux: whether ``loss_fn`` returns ``(loss, aux)``.

  Returns:
    ``update(params, opt_state, *args) -> Update``.
  """
  value_and_grad = jax.value_and_grad(loss_fn, has_aux=has_aux)

  def update(params: PyTree, opt_state: PyTree, *args: Any) -> Update:
    if has_aux:
      (loss, aux), grads = value_and_grad(params, *args)
    else:
      (loss, grads), aux = value_and_grad(params, *args), None
    updates, opt_state = tx.update(grads, opt_state, params)
    return Update(optax.apply_updates(params, updates), opt_state, loss, aux, grads)

  return update


def ema_update(ema_params: PyTree, params: PyTree, decay: float | jax.Array) -> PyTree:
  """``decay * ema + (1 - decay) * params``, leaf by leaf (``optax.incremental_update``).

  Raises:
    ValueError: a Python ``decay`` outside [0, 1).
  """
  if isinstance(decay, (int, float)) and not 0.0 <= decay < 1.0:
    raise ValueError(f"decay must be in [0, 1); got {decay}")
  return optax.incremental_update(params, ema_params, 1.0 - decay)


def where_tree(condition: jax.Array, new: PyTree, old: PyTree) -> PyTree:
  """``new`` where ``condition`` holds, else ``old``, for every leaf (scalar condition)."""
  return jax.tree.map(lambda a, b: jnp.where(condition, a, b), new, old)


def _reduce_stacked(metrics: Metrics, how: str | Callable[[Metrics], Metrics]) -> Metrics:
  if callable(how):
    return how(metrics)
  if how == "stack":
    return metrics
  if how not in REDUCTIONS:
    raise ValueError(f"metrics must be 'stack', a callable or one of {sorted(REDUCTIONS)}; "
                     f"got {how!r}")
  return jax.tree.map(lambda m: REDUCTIONS[how](m, axis=0), metrics)


def scan_steps(step: Step, length: int, *, batch_axis: int | None = None,
               metrics: str | Callable[[Metrics], Metrics] = "mean") -> Step:
  """``length`` applications of ``step`` as one ``lax.scan``.

  Args:
    step: ``step(state, batch) -> (state, metrics)``.
    length: steps per call (static, >= 1).
    batch_axis: None: every step sees the same ``batch`` (or None); an int: the batch's
      leaves are sliced along this axis, step ``i`` seeing slice ``i`` (the axis must have
      ``length`` entries; axis 1 keeps a sharded leading batch axis in place).
    metrics: how the ``[length]`` stacked metrics become the call's: ``"mean"`` (default),
      ``"last"``, ``"max"``, ..., ``"stack"`` (keep the axis) or a function of the stacked
      dict.

  Returns:
    The step of ``length`` steps. Its final state is bit-identical to ``length`` calls of
    ``step`` (the same operations in the same order; ``tests/core/test_core_blocks.py``).

  Raises:
    ValueError: ``length < 1``.
  """
  length = int(length)
  if length < 1:
    raise ValueError(f"length must be >= 1; got {length}")

  def scanned(state: PyTree, batch: PyTree) -> tuple[PyTree, Metrics]:
    if batch_axis is None:
      body = lambda s, _: step(s, batch)
      state, stacked = jax.lax.scan(body, state, None, length=length)
    else:
      for leaf in jax.tree.leaves(batch):
        if leaf.shape[batch_axis] != length:
          raise ValueError(f"batch axis {batch_axis} must have {length} entries (one per "
                           f"step); got a leaf of shape {leaf.shape}")
      xs = jax.tree.map(lambda b: jnp.moveaxis(b, batch_axis, 0), batch)
      state, stacked = jax.lax.scan(step, state, xs)
    return state, _reduce_stacked(stacked, metrics)

  return scanned


def reduce_members(metrics: Metrics,
                   rules: Mapping[str, Sequence[str]] | None = None,
                   *, per_member: bool = False) -> Metrics:
  """Scalar metrics from ``[R]`` per-member metrics.

  Args:
    metrics: ``{name: [R]}``.
    rules: ``{name: (reduction, ...)}``: the first reduction keeps the name, the others
      add ``_<reduction>`` (``{"loss": ("mean", "max")}`` gives ``loss`` and ``loss_max``);
      names without a rule are averaged.
    per_member: also ``<name>/<i>`` for every member ``i``.
  """
  rules = dict(rules or {})
  out: Metrics = {}
  for name, values in metrics.items():
    for i, how in enumerate(rules.get(name, ("mean",))):
      if how not in REDUCTIONS:
        raise ValueError(f"reduction of {name!r} must be one of {sorted(REDUCTIONS)}; "
                         f"got {how!r}")
      out[name if i == 0 else f"{name}_{how}"] = REDUCTIONS[how](values, axis=0)
    if per_member:
      for i in range(values.shape[0]):
        out[f"{name}/{i}"] = values[i]
  return out


def vmap_members(step: Step, *, batch_axis: int | None = None,
                 rules: Mapping[str, Sequence[str]] | None = None,
                 per_member: bool = False, reduce: bool = True,
                 split: bool = False, sequential: bool | None = False) -> Step:
  """``step`` over a leading member axis of the state (seeds or numeric variants).

  Args:
    step: one member's ``step(state, batch) -> (state, metrics)``.
    batch_axis: None: every member sees the same batch; an int: the batch is split along
      this axis, one slice per member.
    rules, per_member: how per-member metrics become scalars (:func:`reduce_members`).
    reduce: False keeps the ``[R]`` metrics (for a caller that reduces them itself).
    split: split the member axis over the devices of the mesh the program is traced under
      (``train_loop.run`` traces under its mesh) when that many devices divide R: each
      device runs its own R / devices members (``distributed.per_device``, a ``shard_map``)
      and nothing crosses devices inside ``step``, whose own ``distributed.split`` calls
      are then no-ops; a host callback in ``step`` runs on each device for its own
      members. Otherwise, and without a mesh of several devices, it changes nothing.
    sequential: run the members one after another (``lax.map`` over the member axis, each
      member by ``step`` itself) instead of batching them under ``vmap``; with ``split``,
      each device runs its own members one after another. The same function; the rounding
      of a batched op may differ. On XLA:CPU, where a vmapped member axis runs on the same
      cores anyway, the batched program was the slower one for AERCA's seeds,
      identifiability's runs (1.14-1.24x per step on one core, ``seeds/aerca.md``, "Members
      one after another") and CCA's (1.6x); on an accelerator ``vmap`` runs the members in
      parallel. None: where :func:`members_in_sequence_by_default` says it pays.

  Returns:
    The step of every member; member ``r``'s state is what ``step`` gives it alone. A
    single member (a leading axis of size 1) runs ``step`` itself, not a vmap of one:
    the same function, but XLA:CPU compiled AERCA's size-1 vmapped epoch 1.1-1.7x slower
    than the plain one (``seeds/aerca.md``, "Speed").
  """
  if sequential is None:
    sequential = members_in_sequence_by_default()
  batched = jax.vmap(step, in_axes=(0, batch_axis))

  def in_sequence(state: PyTree, batch: PyTree) -> tuple[PyTree, Metrics]:
    if batch_axis is None:
      return jax.lax.map(lambda s: step(s, batch), state)
    batch = jax.tree.map(lambda x: jnp.moveaxis(x, batch_axis, 0), batch)
    return jax.lax.map(lambda sb: step(*sb), (state, batch))

  vmapped = in_sequence if sequential else batched

  def one_member(state: PyTree, batch: PyTree) -> tuple[PyTree, Metrics]:
    first = lambda x, axis=0: jax.lax.index_in_dim(x, 0, axis, keepdims=False)
    if batch_axis is not None:
      batch = jax.tree.map(lambda x: first(x, batch_axis), batch)
    state, metrics = step(jax.tree.map(first, state), batch)
    return jax.tree.map(lambda x: jnp.expand_dims(x, 0), (state, metrics))

  def split_members(state: PyTree, batch: PyTree) -> tuple[PyTree, Metrics]:
    def local(state, batch):   # one device's members, batched or in a loop; no collectives
      with distributed.axis_taken():
        return vmapped(state, batch)
    return distributed.per_device(local, batch_axis)(state, batch)

  def members(state: PyTree, batch: PyTree) -> tuple[PyTree, Metrics]:
    leaves = jax.tree.leaves(state)
    size = jnp.shape(leaves[0])[0] if leaves else 0
    single = bool(leaves) and all(jnp.shape(x)[:1] == (1,) for x in leaves)
    devices = distributed.split_count()
    if single:
      state, metrics = one_member(state, batch)
    elif split and devices > 1 and size % devices == 0:
      state, metrics = split_members(state, batch)
    else:
      state, metrics = vmapped(state, batch)
    if not reduce:
      return state, metrics
    return state, reduce_members(metrics, rules, per_member=per_member)

  return members


def members_in_sequence_by_default(backend: str | None = None) -> bool:
  """Whether a kernel's members should run one after another (``vmap_members(sequential=
  True)``) here: on a CPU backend whose devices have at most one core each (this process's
  CPUs / its local devices), as in the main job's checks and the test suite's workers,
  each pinned to one core, or a mesh of one CPU device per core.

  Measured on 2 cores (``seeds/aerca.md``, "Members one after another"): with one core per
  device the batched program ran 1.14-1.24x slower than the members in sequence (AERCA's 8
  seeds, identifiability's 6 runs; CCA's runs 1.6x); with both cores on one device XLA
  spreads the batched ops over them and the batch was as fast or faster (sequence / batch
  0.96-0.98x for identifiability, 0.97x for AERCA's 8 seeds; only AERCA's 3 seeds 1.11x), so
  there, and on accelerators, the batch stays.
  """
  backend = jax.default_backend() if backend is None else backend
  if backend != "cpu":
    return False
  return len(affinity.available()) <= jax.local_device_count(backend)


def vmap_partition(steps: Sequence[Step], groups: Sequence[np.ndarray | Sequence[int]],
                   *, batch_axis: int | None = None,
                   rules: Mapping[str, Sequence[str]] | None = None,
                   per_member: bool = False, reduce: bool = True) -> Step:
  """Members split into static groups, group ``g`` vmapped under ``steps[g]``.

  Where some members switch a costly term off (a loss weight of 0), a single vmapped step
  still computes the term for them and multiplies it by 0: under ``vmap`` a ``cond`` on a
  member's value runs both branches. Partitioning the members by what they compute runs
  each group's own program instead. Member ``r``'s state is what its group's step gives it
  alone, exactly as :func:`vmap_members` would give it.

  Args:
    steps: one member's ``step(state, batch) -> (state, metrics)`` per group; each returns
      the same metric names.
    groups: ``[R_g]`` member indices per group, together a partition of ``range(R)``
      (concrete ints, fixed when the program is built).
    batch_axis: as in :func:`vmap_members` (a sliced batch is gathered per group).
    rules, per_member, reduce: as in :func:`vmap_members`; the reduction runs over all R
      members in their original order.

  Raises:
    ValueError: ``groups`` is not a partition of ``range(R)`` or ``steps`` and ``groups``
      differ in length.
  """
  groups = [np.asarray(g, np.int32).reshape(-1) for g in groups]
  if len(steps) != len(groups) or not groups:
    raise ValueError(f"steps and groups must be non-empty and of the same length; got "
                     f"{len(steps)} steps and {len(groups)} groups")
  order = np.concatenate(groups)
  if np.any(np.sort(order) != np.arange(order.size)):
    raise ValueError(f"groups must partition range(R) (each member in exactly one group); "
                     f"got {[g.tolist() for g in groups]}")
  inverse = np.argsort(order)
  vmapped = [(jax.vmap(s, in_axes=(0, batch_axis)), g) for s, g in zip(steps, groups)
             if g.size]   # an empty group has no program

  def members(state: PyTree, batch: PyTree) -> tuple[PyTree, Metrics]:
    outs = []
    for step, idx in vmapped:
      part = (batch if batch_axis is None
              else jax.tree.map(lambda a, i=idx: jnp.take(a, i, axis=batch_axis), batch))
      outs.append(step(jax.tree.map(lambda a, i=idx: a[i], state), part))
    joined = jax.tree.map(lambda *parts: jnp.concatenate(parts)[inverse], *outs)
    state, metrics = joined
    if not reduce:
      return state, metrics
    return state, reduce_members(metrics, rules, per_member=per_member)

  return members


def member_mapped_loss(loss_fn: Callable[..., jax.Array], argnums: Sequence[int] = (0,)
                       ) -> Callable[..., jax.Array]:
  """``loss_fn`` whose value and gradient run one member at a time under ``vmap``.

  Under :func:`vmap_members` every op of a member's step is batched over the members. For a
  loss over a large intermediate, such as the ``[B, K]`` logits of a linear head on a few
  features (``[B, d] @ [d, K]``, ``d = 5``, ``K = 1000``) and their softmax cross-entropy,
  XLA:CPU runs the batched program slower than the same program one member after another
  (mostly the softmax over the logits: one member's ``[B, K]`` block stays in cache; the
  dots alone are not faster unbatched; seeds/identifiability.md, "Speed"). The returned
  function equals ``loss_fn``; under ``vmap`` it computes ``value_and_grad(loss_fn)`` with
  ``lax.map`` over the batched axis (an unbatched argument broadcast to it; a nested
  ``vmap`` maps every axis), keeps the gradients from the forward pass and returns them
  times the incoming cotangent. When the
  loss is the differentiated output (cotangent 1, as in :func:`gradient_step`), every
  member runs the same ops as autodiff of the vmapped ``loss_fn``; whether XLA:CPU rounds
  them the same batched and unbatched depends on the shapes: bitwise for the
  identifiability head (d = 5, K = 100 or 1000, batch 64 to 1024: gradients and trained
  states; ``tests/core/test_core_blocks.py``), not at d = 3, K = 16, batch 32 (last
  bits), and a loss value may differ in its last bit (the batch mean reduced in another
  order). The gradient is computed even when only the value is used, so keep a plain
  ``loss_fn`` for evaluation; first derivatives only (the backward pass returns the saved
  gradients, so a second derivative through it is wrong).

  Args:
    loss_fn: ``loss_fn(*args) -> []``, one member's scalar loss (e.g. ``features [B, d]``,
      ``w [K, d]``, ``labels [B]``).
    argnums: the positions of the arguments differentiated; the others are constants (no
      gradient flows to them; integer labels, for instance).

  Returns:
    ``loss(*args) -> []``, equal to ``loss_fn(*args)``.
  """
  argnums = tuple(int(i) for i in argnums)

  @jax.custom_batching.custom_vmap
  def value_and_grad(*args: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    return jax.value_and_grad(loss_fn, argnums=argnums)(*args)

  @value_and_grad.def_vmap
  def value_and_grad_vmap(axis_size, in_batched, *args):
    # Each member calls value_and_grad again, so an outer vmap is mapped as well.
    args = tuple(x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
                 for x, batched in zip(args, in_batched))
    out = jax.lax.map(lambda member: value_and_grad(*member), args)
    return out, jax.tree.map(lambda _: True, out)

  @jax.custom_vjp
  def loss(*args: jax.Array) -> jax.Array:
    return value_and_grad(*args)[0]

  def loss_fwd(*args):
    value, grads = value_and_grad(*args)
    return value, (grads, args)   # the arguments only for their number (unused: no cost)

  def loss_bwd(residuals, cotangent):
    grads, args = residuals
    grads = dict(zip(argnums, grads))
    return tuple(cotangent * grads[i] if i in grads else None for i in range(len(args)))

  loss.defvjp(loss_fwd, loss_bwd)
  return loss


def member_keys(key: jax.Array, num_members: int,
                seed_index: np.ndarray | Sequence[int] | None = None) -> jax.Array:
  """``[R]`` keys: one per member, or one per seed shared by members of the same seed.

  Args:
    key: a typed PRNG key.
    num_members: R.
    seed_index: ``[R]`` ints, the seed of each member (members of one seed get the same
      key, so variants of a seed share its problem and initialisation); None: every
      member its own seed.
  """
  if seed_index is None:
    return jax.random.split(key, int(num_members))
  seed_index = np.asarray(seed_index, np.int32)
  if seed_index.shape != (int(num_members),) or seed_index.min(initial=0) < 0:
    raise ValueError(f"seed_index must be [{num_members}] non-negative ints; got "
                     f"{seed_index}")
  return jax.random.split(key, int(seed_index.max()) + 1)[seed_index]


def vmap_init(init_member: Callable[..., PyTree], num_members: int, *member_args: Any,
              seed_index: np.ndarray | Sequence[int] | None = None
              ) -> Callable[[jax.Array], PyTree]:
  """``init(key)`` of ``num_members`` members: ``init_member(key_r, *args_r)`` vmapped.

  Args:
    init_member: one member's ``init(key, *args) -> state``.
    num_members: R.
    *member_args: arrays (or pytrees of arrays) with a leading ``[R]`` axis (a member's
      variant values, or a per-member reference such as a pretrained model).
    seed_index: see :func:`member_keys`.
  """
  if int(num_members) < 1:
    raise ValueError(f"num_members must be >= 1; got {num_members}")

  def init(key: jax.Array) -> PyTree:
    keys = member_keys(key, num_members, seed_index)
    return jax.vmap(init_member)(keys, *(jax.tree.map(jnp.asarray, a) for a in member_args))

  return init


class Best(NamedTuple):
  """The best parameters so far by a validation value (lower is better)."""
  params: PyTree          # parameters at the best value
  value: jax.Array        # [] the best value so far (inf before the first)
  bad_epochs: jax.Array   # [] int32, evaluations since the last improvement
  active: jax.Array       # [] bool, still training (patience not exhausted)


def init_best(params: PyTree) -> Best:
  """A :class:`Best` before any evaluation (value inf, active)."""
  return Best(params, jnp.full((), jnp.inf, jnp.float32), jnp.zeros((), jnp.int32),
              jnp.ones((), bool))


def keep_best(best: Best, params: PyTree, value: jax.Array,
              patience: int | None = None) -> Best:
  """Updates ``best`` with the parameters ``params`` evaluated at ``value``.

  An inactive ``best`` (stopped early) does not change. ``bad_epochs`` counts evaluations
  since the last strict improvement; with ``patience`` the tracker turns inactive once
  ``bad_epochs`` reaches it (early stopping), without it it never stops.
  """
  improved = best.active & (value < best.value)
  bad = jnp.where(improved, 0, jnp.where(best.active, best.bad_epochs + 1, best.bad_epochs))
  active = best.active if patience is None else best.active & (bad < int(patience))
  return Best(where_tree(improved, params, best.params),
              jnp.where(improved, value, best.value), bad, active)
