"""The training kernels: a member per (cutoff, energy weight, seed), vmapped in one program.

A member's state is a :class:`FlowState`; its variant values (cutoff delta, energy weight,
pool index) ride in the state, so one compiled step trains every member. Members of one
seed share their key, hence the candidate sub-batches and the initialisation: the cutoffs
see the same B x B costs (sliced from the seed's pool costs, computed once). A step:

1. draws B rows and B columns of the seed's pool (the candidate batch, costs shared);
2. couples them (``draw``: the paper's cutoff for docking, the candidate rule for
   relaxation), giving fixed-shape pairs and weights;
3. takes one Adam step on the weighted CFM loss (+ the energy term) (``core.blocks``).
   Members at energy weight 0 run a step without the energy (``blocks.vmap_partition``):
   in one vmapped step they would compute it and multiply it by 0 (the energy is most of a
   docking step's time).

``k`` steps run as one ``lax.scan`` (``blocks.scan_steps``); ``core.train_loop`` runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import blocks, contract, nn, prng
from jaxlib_papers.unbalanced_fm import couplings, losses

PyTree = Any


class FlowState(NamedTuple):
  """One member (a leading ``[R]`` axis when vmapped)."""
  params: PyTree           # the velocity network
  opt_state: PyTree        # Adam
  key: jax.Array           # typed PRNG key
  delta: jax.Array         # [] cutoff of this member (inf: independent coupling)
  energy_weight: jax.Array  # [] factor of the flat-bottom energy term (0: off)
  pool: jax.Array          # [] int32, the seed's pool index


class NetSettings(NamedTuple):
  """The velocity network and its optimiser."""
  dim: int                 # D, the flattened conformer size
  hidden: int = 128
  depth: int = 3
  time_embed: int = 32
  lr: float = 1e-3
  decay_steps: int = 0     # > 0: cosine decay of lr to 0 over this many steps; 0: constant


class DockPools(NamedTuple):
  """Per-seed training pools of the docking flow."""
  apo: jax.Array       # [S, N, D] x0 pool (p0)
  holo: jax.Array      # [S, N, D] x1 pool (p1)
  cost: jax.Array      # [S, N, N] Kabsch RMSD between them


class RelaxPools(NamedTuple):
  """Per-seed training pools of the relaxation flow."""
  docked: jax.Array    # [S, N, K, D] candidates per holo conformer
  holo: jax.Array      # [S, N, D]
  cost: jax.Array      # [S, N, K] Kabsch RMSD of each candidate to its holo


Draw = Callable[[jax.Array, FlowState], tuple[jax.Array, jax.Array, jax.Array]]


def network(net: NetSettings) -> nn.TimeMLP:
  return nn.TimeMLP(out_dim=net.dim, hidden=net.hidden, depth=net.depth,
                    time_embed_dim=net.time_embed)


def velocity_fn(net: NetSettings, params: PyTree) -> losses.Velocity:
  """``v(x [B, D], t [B] or [1]) -> [B, D]`` of the network with ``params``."""
  model = network(net)
  return lambda x, t: model.apply(params, x, t)


def optimizer(net: NetSettings) -> optax.GradientTransformation:
  """Adam at ``lr``, constant or cosine-decayed to 0 over ``decay_steps``."""
  if net.decay_steps > 0:
    return optax.adam(optax.cosine_decay_schedule(net.lr, net.decay_steps))
  return optax.adam(net.lr)


def init_member(net: NetSettings) -> Callable[..., FlowState]:
  """``init(key, delta, energy_weight, pool) -> FlowState`` of one member."""
  model, tx = network(net), optimizer(net)

  def init(key, delta, energy_weight, pool):
    k_init, k_run = jax.random.split(key)
    params = model.init(k_init, jnp.zeros((1, net.dim)), jnp.zeros((1,)))
    return FlowState(params, tx.init(params), k_run, jnp.asarray(delta, jnp.float32),
                     jnp.asarray(energy_weight, jnp.float32), jnp.asarray(pool, jnp.int32))

  return init


def dock_draw(pools: DockPools, batch: int) -> Draw:
  """The paper's coupling on a B x B candidate batch of the member's pool."""
  size = pools.apo.shape[1]

  def draw(key, state):
    k_rows, k_cols, k_pairs = jax.random.split(key, 3)
    rows = prng.randint(k_rows, (batch,), 0, size)
    cols = prng.randint(k_cols, (batch,), 0, size)
    cost = pools.cost[state.pool][rows][:, cols]
    pairs = couplings.cutoff(k_pairs, cost, state.delta, batch)
    x0 = pools.apo[state.pool][rows[pairs.rows]]
    x1 = pools.holo[state.pool][cols[pairs.cols]]
    return x0, x1, pairs.weights

  return draw


def relax_draw(pools: RelaxPools, batch: int, epsilon: float = 0.0) -> Draw:
  """The official relaxation rule: B holo targets, one candidate each (cutoff delta)."""
  size = pools.holo.shape[1]

  def draw(key, state):
    k_rows, k_pairs = jax.random.split(key)
    rows = prng.randint(k_rows, (batch,), 0, size)
    cost = pools.cost[state.pool][rows]
    rule = couplings.CandidateRule(state.delta, epsilon)
    pairs = couplings.candidate(k_pairs, cost, rule)
    x0 = pools.docked[state.pool][rows, pairs.cols]
    return x0, pools.holo[state.pool][rows], pairs.weights

  return draw


def member_step(net: NetSettings, draw: Draw, energy: losses.Energy | None
                ) -> blocks.Step:
  """One member's ``step(state, batch=None) -> (state, metrics)``."""
  model, tx = network(net), optimizer(net)

  def loss_fn(params, x0, x1, t, weights, energy_weight):
    velocity = lambda x, s: model.apply(params, x, s)
    return losses.weighted_fm_loss(velocity, x0, x1, t, weights, energy, energy_weight)

  update = blocks.gradient_step(loss_fn, tx, has_aux=True)

  def step(state: FlowState, batch=None):
    del batch
    key, k_draw, k_t = jax.random.split(state.key, 3)
    x0, x1, weights = draw(k_draw, state)
    t = prng.uniform(k_t, weights.shape)
    out = update(state.params, state.opt_state, x0, x1, t, weights, state.energy_weight)
    metrics = {"loss": out.loss, "fm": out.aux["fm"], "energy": out.aux["energy"],
               "accepted": out.aux["accepted"]}
    return state._replace(params=out.params, opt_state=out.opt_state, key=key), metrics

  return step


def make_kernel(net: NetSettings, draw: Draw, energy: losses.Energy | None,
                members: tuple[jax.Array, jax.Array, jax.Array], steps_per_call: int,
                seed_index) -> contract.TrainKernel:
  """The members' :class:`~jaxlib_papers.core.contract.TrainKernel`.

  Args:
    net: the network settings.
    draw: the coupling of a step (:func:`dock_draw` or :func:`relax_draw`).
    energy: the flat-bottom energy of flattened conformers, or None.
    members: ``(delta [R], energy_weight [R], pool [R])``.
    steps_per_call: optimiser steps per compiled call (one ``lax.scan``).
    seed_index: ``[R]`` the seed of each member (members of one seed share its key).

  Extras: ``sample(params, x0 [n, D], num_steps) -> [n, D]`` (one member's Euler flow).
  """
  delta, weight, pool = members
  init = blocks.vmap_init(init_member(net), len(delta), delta, weight, pool,
                          seed_index=seed_index)
  rules = {"loss": ("mean", "max"), "accepted": ("mean", "min")}
  off = np.flatnonzero(np.asarray(weight) == 0)
  if energy is None or off.size in (0, len(delta)):
    step = blocks.vmap_members(member_step(net, draw, None if off.size else energy),
                               rules=rules)
  else:   # members at weight 0 skip the energy (under one vmap they would compute it x 0)
    on = np.flatnonzero(np.asarray(weight) != 0)
    step = blocks.vmap_partition([member_step(net, draw, None), member_step(net, draw, energy)],
                                 [off, on], rules=rules)
  scanned = blocks.scan_steps(step, steps_per_call, metrics="mean")

  def sample(params, x0, num_steps):
    return losses.euler(velocity_fn(net, params), x0, num_steps)

  return contract.train_kernel(init, scanned, sample=sample)
