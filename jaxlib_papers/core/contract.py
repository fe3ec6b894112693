"""The method contract: what every package's factory returns (after optax's ``base.py``).

Three shapes, defined once here and used by every method:

* :class:`TrainKernel` for trained methods: ``init(key) -> state`` and
  ``train_step(state, batch) -> (state, metrics)``, pure and unjitted, plus named extras
  (samplers, evaluators) a method exposes. :func:`jaxlib_papers.core.train_loop.run` is the
  one loop that runs it.
* :class:`Solver` for iterative solvers: a typed state NamedTuple and pure ``init_state`` /
  ``step`` / ``done`` / ``output``, run by :func:`iterate`, one shared ``lax.while_loop``
  driver (like ott-jax's ``fixed_point_loop``).
* :class:`Agent` for episodic reinforcement learners (no gradient steps, no convergence
  test: a fixed number of episodes): pure ``plan`` (once per episode, from the agent's
  memory), ``act`` (at every step) and ``learn`` (from the finished episode), interacting
  with an :class:`Episodic` environment (``reset``, ``transition``); :func:`run_episodes`,
  one shared ``lax.scan`` over episodes (each a ``lax.scan`` over steps, :func:`rollout`),
  runs them.

Nothing here jits: the loop or the caller does, so a test can run any kernel eagerly and
jitted and compare.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any
Metrics = dict[str, jax.Array]
InitFn = Callable[[jax.Array], PyTree]
TrainStepFn = Callable[[PyTree, PyTree], tuple[PyTree, Metrics]]

_NO_EXTRAS: Mapping[str, Callable[..., Any]] = types.MappingProxyType({})


class TrainKernel(NamedTuple):
  """A trained method: two pure functions and optional named extras.

  Attributes:
    init: ``init(key) -> state``; ``key`` a typed PRNG key, ``state`` a NamedTuple pytree
      that holds everything a resume needs (params, optimiser state, PRNG key, step).
    train_step: ``train_step(state, batch) -> (state, metrics)``; ``metrics`` a dict of
      scalar arrays containing ``"loss"``. ``batch`` has a leading global-batch axis (the
      loop shards it over the ``data`` mesh axis), or is None for batch-free kernels.
    extras: further pure functions of the method (``sample``, ``evaluate``, ...), reachable
      as attributes: ``kernel.sample`` is ``kernel.extras["sample"]``.
  """

  init: InitFn
  train_step: TrainStepFn
  extras: Mapping[str, Callable[..., Any]] = _NO_EXTRAS

  def __getattr__(self, name: str) -> Callable[..., Any]:
    # Only reached when normal lookup fails, i.e. for names that are not fields.
    extras = tuple.__getitem__(self, 2)
    if name in extras:
      return extras[name]
    raise AttributeError(
        f"{type(self).__name__} has no field or extra {name!r}; extras: {sorted(extras)}")


def train_kernel(init: InitFn, train_step: TrainStepFn, /,
                 **extras: Callable[..., Any]) -> TrainKernel:
  """``TrainKernel(init, train_step, extras)`` with the extras as keyword arguments."""
  for name in extras:
    if name in TrainKernel._fields:
      raise ValueError(f"extra {name!r} clashes with a TrainKernel field")
  return TrainKernel(init, train_step, types.MappingProxyType(dict(extras)))


class Solver(NamedTuple):
  """An iterative solver over a typed state NamedTuple.

  Attributes:
    init_state: ``init_state(*problem) -> state``.
    step: ``step(state) -> state``, one iteration.
    done: ``done(state) -> bool[]``, the convergence test (checked before every step).
    output: ``output(state) -> result``, what the caller receives.
  """

  init_state: Callable[..., PyTree]
  step: Callable[[PyTree], PyTree]
  done: Callable[[PyTree], jax.Array]
  output: Callable[[PyTree], Any]


class IterateResult(NamedTuple):
  output: Any              # solver.output(final state)
  state: PyTree            # the final state
  iterations: jax.Array    # [] int32, steps taken
  converged: jax.Array     # [] bool, done(final state)


def iterate(solver: Solver, *problem: Any, max_iterations: int) -> IterateResult:
  """Runs ``solver`` from ``init_state(*problem)`` until ``done`` or ``max_iterations``.

  One ``lax.while_loop`` (jittable, vmappable; not reverse-differentiable: differentiate
  through the solution implicitly if needed). ``max_iterations`` is static.

  Raises:
    ValueError: ``max_iterations`` is negative.
  """
  if int(max_iterations) < 0:
    raise ValueError(f"max_iterations must be >= 0; got {max_iterations}")
  state = solver.init_state(*problem)

  def cond(carry):
    i, s = carry
    return jnp.logical_and(i < max_iterations, jnp.logical_not(solver.done(s)))

  def body(carry):
    i, s = carry
    return i + 1, solver.step(s)

  iterations, state = jax.lax.while_loop(cond, body, (jnp.int32(0), state))
  return IterateResult(solver.output(state), state, iterations,
                       jnp.asarray(solver.done(state), bool))


class Agent(NamedTuple):
  """An episodic agent: plans once per episode, acts at every step, learns from episodes.

  Attributes:
    plan: ``plan(memory, key) -> policy``; ``memory`` a pytree of fixed shape (the
      agent's data so far), ``policy`` what ``act`` needs for one episode.
    act: ``act(policy, step, state, key) -> action``; ``step`` an int32 [] in [0, H).
    learn: ``learn(memory, policy, initial_state, records) -> (memory, metrics)`` after
      an episode; ``records`` the episode's stacked transition records (leading [H]),
      ``metrics`` a pytree of arrays (stacked to a leading [T] by :func:`run_episodes`).
  """

  plan: Callable[[PyTree, jax.Array], PyTree]
  act: Callable[[PyTree, jax.Array, PyTree, jax.Array], PyTree]
  learn: Callable[[PyTree, PyTree, PyTree, PyTree], tuple[PyTree, PyTree]]


class Episodic(NamedTuple):
  """An episodic environment of fixed horizon as pure functions.

  Attributes:
    horizon: H, steps per episode (static).
    reset: ``reset(key) -> state``, an episode's initial state.
    transition: ``transition(step, state, action, key) -> (next_state, record)``;
      ``record`` what the agent learns from (a pytree, stacked over the H steps).
  """

  horizon: int
  reset: Callable[[jax.Array], PyTree]
  transition: Callable[[jax.Array, PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]]


def rollout(agent: Agent, env: Episodic, policy: PyTree, initial_state: PyTree,
            key: jax.Array) -> PyTree:
  """One episode of ``agent`` under ``policy`` from ``initial_state``: the [H] records.

  One ``lax.scan`` over the steps; step ``h`` splits its key into (act, transition) keys.
  """

  def step(state, xs):
    h, k = xs
    k_act, k_env = jax.random.split(k)
    action = agent.act(policy, h, state, k_act)
    return env.transition(h, state, action, k_env)

  xs = (jnp.arange(env.horizon), jax.random.split(key, env.horizon))
  _, records = jax.lax.scan(step, initial_state, xs)
  return records


def run_episodes(agent: Agent, env: Episodic, memory: PyTree, key: jax.Array,
                 num_episodes: int) -> tuple[PyTree, PyTree]:
  """``num_episodes`` episodes of ``agent`` in ``env`` as one ``lax.scan``.

  Episode ``t`` splits its key into (plan, reset, rollout) keys, plans from the memory,
  rolls out (:func:`rollout`) and learns. Pure and unjitted (jittable, vmappable over
  seeds: the caller jits).

  Args:
    agent: the :class:`Agent`.
    env: the :class:`Episodic` environment.
    memory: the agent's initial memory.
    key: a PRNG key (split into one key per episode).
    num_episodes: T >= 1 (static).

  Returns:
    ``(final memory, metrics)``, the metrics of every episode stacked to a leading [T].

  Raises:
    ValueError: ``num_episodes < 1``.
  """
  if int(num_episodes) < 1:
    raise ValueError(f"num_episodes must be >= 1; got {num_episodes}")

  def episode(memory, k):
    k_plan, k_reset, k_roll = jax.random.split(k, 3)
    policy = agent.plan(memory, k_plan)
    initial_state = env.reset(k_reset)
    records = rollout(agent, env, policy, initial_state, k_roll)
    return agent.learn(memory, policy, initial_state, records)

  return jax.lax.scan(episode, memory, jax.random.split(key, int(num_episodes)))
