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


class _Counts(NamedTuple):
  pulls: jax.Array    # [A] times each arm was pulled
  rewards: jax.Array  # [A] summed rewards of each arm


def _bandit(horizon=3, arms=4):
  """A Thompson-like agent on a noisy bandit whose state counts the steps taken."""
  means = jnp.linspace(0.0, 1.0, arms)
  agent = contract.Agent(
      plan=lambda m, k: m.rewards / (m.pulls + 1.0) + jax.random.normal(k, (arms,)),
      act=lambda policy, h, state, k: jnp.argmax(policy + 0.01 * jax.random.normal(
          k, (arms,))),
      learn=lambda m, policy, s0, rec: (
          _Counts(m.pulls + jnp.bincount(rec[0], length=arms),
                  m.rewards + jnp.zeros(arms).at[rec[0]].add(rec[1])),
          {"return": jnp.sum(rec[1]), "start": s0}))
  env = contract.Episodic(
      horizon, reset=lambda k: jax.random.uniform(k),
      transition=lambda h, s, a, k: (s + 1.0, (a, means[a] + 0.1 * jax.random.normal(k))))
  return agent, env, _Counts(jnp.zeros(arms), jnp.zeros(arms))


def test_run_episodes_jit_equals_eager_and_matches_a_python_loop():
  agent, env, memory = _bandit()
  key = jax.random.key(0)
  eager = contract.run_episodes(agent, env, memory, key, 20)
  jitted = jax.jit(lambda k: contract.run_episodes(agent, env, memory, k, 20))(key)
  jax.tree.map(np.testing.assert_array_equal, eager, jitted)
  # The documented key order: one key per episode, split into (plan, reset, rollout).
  mem, returns = memory, []
  for k in jax.random.split(key, 20):
    k_plan, k_reset, k_roll = jax.random.split(k, 3)
    policy = agent.plan(mem, k_plan)
    start = env.reset(k_reset)
    mem, metrics = agent.learn(mem, policy, start,
                               contract.rollout(agent, env, policy, start, k_roll))
    returns.append(metrics["return"])
  np.testing.assert_allclose(eager[1]["return"], returns, rtol=1e-6)
  np.testing.assert_array_equal(eager[0].pulls, mem.pulls)
  assert float(eager[0].pulls.sum()) == 20 * env.horizon
  seeds = jax.vmap(lambda k: contract.run_episodes(agent, env, memory, k, 5)[1]["return"])(
      jax.random.split(key, 3))
  assert seeds.shape == (3, 5)
  with pytest.raises(ValueError, match="num_episodes"):
    contract.run_episodes(agent, env, memory, key, 0)
