"""The method contract: TrainKernel extras, and the shared while_loop solver driver."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core import contract


def test_train_kernel_exposes_extras_as_attributes_and_rejects_unknown():
  kernel = contract.train_kernel(lambda key: 0, lambda s, b: (s, {"loss": 0.0}),
                                 sample=lambda s: s + 1)
  assert kernel.sample(1) == 2
  assert kernel.init(None) == 0
  init, train_step, extras = kernel  # still a plain NamedTuple of three fields
  assert set(extras) == {"sample"}
  with pytest.raises(AttributeError, match="no field or extra 'evaluate'"):
    _ = kernel.evaluate
  with pytest.raises(ValueError, match="clashes"):
    contract.train_kernel(lambda k: 0, lambda s, b: (s, {}), init=lambda: 0)


class _Newton(NamedTuple):
  x: jax.Array        # [] current iterate
  target: jax.Array   # [] the number whose square root is sought


def _sqrt_solver(tol):
  return contract.Solver(
      init_state=lambda a: _Newton(jnp.maximum(a, 1.0), a),
      step=lambda s: s._replace(x=0.5 * (s.x + s.target / s.x)),
      done=lambda s: jnp.abs(s.x * s.x - s.target) <= tol * s.target,
      output=lambda s: s.x)


def test_iterate_converges_jit_equals_eager_and_vmaps():
  solver = _sqrt_solver(1e-6)
  eager = contract.iterate(solver, jnp.float32(2.0), max_iterations=50)
  jitted = jax.jit(lambda a: contract.iterate(solver, a, max_iterations=50))(jnp.float32(2.0))
  np.testing.assert_allclose(eager.output, np.sqrt(2.0), rtol=1e-6)
  assert bool(eager.converged) and int(eager.iterations) == int(jitted.iterations) < 10
  np.testing.assert_array_equal(eager.output, jitted.output)
  batched = jax.vmap(lambda a: contract.iterate(solver, a, max_iterations=50))(
      jnp.array([2.0, 9.0, 1e4], jnp.float32))
  np.testing.assert_allclose(batched.output, [np.sqrt(2.0), 3.0, 100.0], rtol=1e-6)


def test_iterate_stops_at_the_budget_and_reports_not_converged():
  result = contract.iterate(_sqrt_solver(0.0), jnp.float32(2.0), max_iterations=3)
  assert int(result.iterations) == 3
  zero = contract.iterate(_sqrt_solver(1e-6), jnp.float32(4.0), max_iterations=0)
  assert int(zero.iterations) == 0 and float(zero.output) == 4.0
  with pytest.raises(ValueError, match="max_iterations"):
    contract.iterate(_sqrt_solver(1e-6), jnp.float32(2.0), max_iterations=-1)
