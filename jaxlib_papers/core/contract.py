"""The method contract: what every package's factory returns (after optax's ``base.py``).

Two shapes, defined once here and used by every method:

* :class:`TrainKernel` for trained methods: ``init(key) -> state`` and
  ``train_step(state, batch) -> (state, metrics)``, pure and unjitted, plus named extras
  (samplers, evaluators) a method exposes. :func:`jaxlib_papers.core.train_loop.run` is the
  one loop that runs it.
* :class:`Solver` for iterative solvers: a typed state NamedTuple and pure ``init_state`` /
  ``step`` / ``done`` / ``output``, run by :func:`iterate`, one shared ``lax.while_loop``
  driver (like ott-jax's ``fixed_point_loop``).

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
