"""The online solvers: the sphere in float32, the alignment chain against the full step,
jit == eager, seeds sharded over 8 fake devices == one device, bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from jaxlib_papers.core import distributed, prng
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.single_index import kernel, links, losses

HE3 = links.LINKS["he3"]


def _settings(degree=1, radius=0.0, dim=16, eta=0.05, **kw):
  return kernel.StepSettings(HE3, HE3.transform, losses.Oracle(degree, radius, dim), eta,
                             noise_std=0.1, **kw)


def test_step_keeps_w_on_the_sphere_in_float32_over_a_million_steps():
  d, steps = 8, 1_000_000
  oracle = losses.Oracle(3, d ** 0.25, d)

  @jax.jit
  def run(key):
    def block(w, k):
      x = prng.normal(k, (1000, d))
      def one(w, x_t):
        w = kernel.spherical_step(w, x_t, jnp.sign(x_t[0]), jnp.float32(0.3), oracle)
        return w, jnp.abs(jnp.linalg.norm(w) - 1.0)
      return lax.scan(one, w, x)
    w0 = jnp.ones(d, jnp.float32) / math.sqrt(d)
    w, drift = lax.scan(block, w0, jax.random.split(key, steps // 1000))
    return w, drift.max()

  w, drift = run(jax.random.key(0))
  assert w.dtype == jnp.float32
  assert float(drift) < 1e-6 and abs(float(jnp.linalg.norm(w)) - 1) < 1e-6


@pytest.mark.parametrize("degree,radius", [(1, 0.0), (3, 0.0), (3, 1.9), (4, 1.9)])
def test_alignment_chain_is_the_full_step_in_the_basis_of_theta_and_w(degree, radius):
  # The same x: (z, v, |x_rest|^2) in the orthonormal basis (theta*, u, rest), u the unit
  # part of w orthogonal to theta*. The chain's m' must be <w', theta*> exactly.
  rng = np.random.default_rng(degree)
  with enable_x64():
    d = 13
    oracle = losses.Oracle(degree, radius, d)
    theta = np.eye(d)[0]
    w = rng.standard_normal(d)
    w /= np.linalg.norm(w)
    m = w @ theta
    u = (w - m * theta) / np.linalg.norm(w - m * theta)
    for _ in range(5):
      x = rng.standard_normal(d)
      z, v = x @ theta, x @ u
      rest = np.sum(x * x) - z * z - v * v
      label, eta = np.sign(z ** 3 - 3 * z), 0.4
      full = jax.jit(kernel.spherical_step, static_argnums=4)(w, x, label, eta, oracle)
      chain = jax.jit(kernel.alignment_step, static_argnums=3)(
          m, kernel.ChainSample(z, v, rest, label), eta, oracle)
      assert float(chain) == pytest.approx(float(full @ theta), abs=1e-13)


def test_chi_square_sampler_has_the_chi_square_law():
  keys = jax.random.split(jax.random.key(1), 20)
  for dof in (2.0, 7.0, 254.0):
    draws = np.asarray(jax.jit(jax.vmap(lambda k, f=dof: kernel.chi_square(k, f, 500)))(
        keys)).ravel()
    assert scipy.stats.kstest(draws, scipy.stats.chi2(dof).cdf).pvalue > 1e-3


def _run(engine, keys):
  spec = kernel.RunSpec(engine, 64, 640, (0.5, 0.9))
  return kernel.run_online(_settings(eta=0.2 / 16), spec, keys)


def test_jit_equals_eager():
  # The full engine's solver step (one chunk of 8 samples) op by op against jitted, and
  # the chain's step (a compiled scan of it is what the chain runs; its chi^2 draws are
  # checked against the law below).
  keys = jax.random.split(jax.random.key(3), 4)
  solver = kernel.online_solver(_settings(eta=0.2 / 16), kernel.RunSpec("full", 8, 640))
  state = jax.jit(solver.init_state)(keys)
  eager, jitted = solver.step(state), jax.jit(solver.step)(state)
  np.testing.assert_allclose(eager.params, jitted.params, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(eager.hits, jitted.hits)
  oracle = losses.Oracle(3, 2.0, 64.0)
  sample = kernel.ChainSample(*prng.normal(jax.random.key(5), (4, 16)))
  m = jnp.linspace(-0.9, 0.9, 16)
  step = lambda m, s: kernel.alignment_step(m, s, 0.05, oracle)
  np.testing.assert_allclose(step(m, sample), jax.jit(step)(m, sample), rtol=1e-5,
                             atol=1e-6)


def test_seeds_sharded_over_eight_devices_equal_one_device():
  assert jax.device_count() == 8
  mesh = distributed.make_mesh()
  keys = jax.random.split(jax.random.key(4), 8)
  program = jax.jit(lambda k: _run("chain", k))
  single = program(jax.device_put(keys, jax.devices()[0]))
  sharded = program(jax.device_put(keys, NamedSharding(mesh, PartitionSpec("data"))))
  assert len(sharded.hits.sharding.device_set) == 8
  np.testing.assert_array_equal(single.hits, sharded.hits)   # the measured n*: exactly
  # The partitioned program may fuse differently: float32 alignments agree to an ulp.
  np.testing.assert_allclose(single.params, sharded.params, rtol=1e-6)


def test_support_recovery_by_hand():
  theta = jnp.array([0.0, 0.5, -0.5, 0.0, 0.0])
  assert bool(kernel.support_found(jnp.array([0.1, 2.0, -3.0, 1.9, 0.0]), theta))
  assert not bool(kernel.support_found(jnp.array([0.1, 2.0, -1.0, 1.9, 0.0]), theta))
  direction = kernel.sparse_direction(jax.random.key(0), 50, 4)
  assert int(jnp.sum(direction != 0)) == 4
  assert float(jnp.linalg.norm(direction)) == pytest.approx(1.0)
  assert kernel.checkpoints(32, 1.15, 100, 16) == (32, 48, 64, 80, 96, 112)


def test_bad_input_is_named():
  with pytest.raises(ValueError, match=r"eta \(the step size\) must be > 0, got -0.1"):
    kernel.online_solver(_settings(eta=-0.1), kernel.RunSpec("chain", 10, 100))
  with pytest.raises(ValueError, match=r"eta \(the step size\) must be > 0, got 0"):
    kernel.online_solver(_settings(eta=0), kernel.RunSpec("chain", 10, 100))
  with pytest.raises(ValueError, match="engine must be one of"):
    kernel.online_solver(_settings(), kernel.RunSpec("gpu", 10, 100))
  with pytest.raises(ValueError, match=r"dim \(d\) must be above the sparsity level k = 8, "
                                       r"got d = 8"):
    kernel.support_solver(kernel.SparseSettings(HE3, HE3.transform, 1, 8, 8, 0.0, 16, (32,)))
  with pytest.raises(ValueError, match="checkpoints must be increasing multiples"):
    kernel.support_solver(kernel.SparseSettings(HE3, HE3.transform, 1, 2, 8, 0.0, 16, (30,)))
