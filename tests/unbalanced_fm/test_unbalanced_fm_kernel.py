"""The masked FM loss, the energy, the Euler sampler and the members' training step:
empty batches, jit == eager, sharded over 8 fake devices == one device."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxlib_papers.core import distributed
from jaxlib_papers.unbalanced_fm import geometry, kernel, losses, problems, train

NET = kernel.NetSettings(dim=24, hidden=8, depth=1, time_embed=4)
# 8 members: cutoffs (0 rejects every pair) x energy weight, all on one pool.
DELTAS = np.array([0.6, 1.0, np.inf, 0.0] * 2, np.float32)
WEIGHTS = np.array([0.0] * 4 + [1.0] * 4, np.float32)


@pytest.fixture(scope="module")
def setup():
  rng = np.random.default_rng(0)
  ligand = problems.make_ligand()
  apo = problems.sample_apo(rng, ligand, 16)[None]
  holo = problems.sample_holo(rng, ligand, 16)[0][None]
  cost = jax.vmap(geometry.pairwise_rmsd)(apo, holo)
  pools = kernel.DockPools(jnp.asarray(apo.reshape(1, 16, 24)),
                           jnp.asarray(holo.reshape(1, 16, 24)), cost)
  members = (DELTAS, WEIGHTS, np.zeros(8, np.int32))
  k = kernel.make_kernel(NET, kernel.dock_draw(pools, 8), train.energy_fn(ligand), members,
                         2, np.zeros(8, np.int32))
  return ligand, k, k.init(jax.random.key(0))


def _linear_velocity(params):
  return lambda x, t: x @ params["w"] + t[:, None] * params["b"]


def test_all_rejected_batch_gives_zero_loss_and_finite_gradients():
  rng = np.random.default_rng(1)
  x0, x1 = (jnp.asarray(rng.normal(size=(6, 24)), jnp.float32) for _ in range(2))
  params = {"w": jnp.eye(24) * 0.1, "b": jnp.ones(24)}
  energy = train.energy_fn(problems.make_ligand())

  def loss(p, w):
    return losses.weighted_fm_loss(_linear_velocity(p), x0, x1, jnp.full(6, 0.3), w,
                                   energy, 1.0)[0]

  value, grads = jax.value_and_grad(loss)(params, jnp.zeros(6))
  assert float(value) == 0.0
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  # With weights: the mean over the accepted pairs only (a brute-force reference).
  w = jnp.asarray([1.0, 0, 1, 0, 0, 1])
  fm = losses.weighted_fm_loss(_linear_velocity(params), x0, x1, jnp.full(6, 0.3), w)[0]
  xt = 0.7 * x0 + 0.3 * x1
  per = ((_linear_velocity(params)(xt, jnp.full(6, 0.3)) - (x1 - x0)) ** 2).mean(-1)
  np.testing.assert_allclose(float(fm), float(per[np.array([0, 2, 5])].mean()), rtol=1e-5)


def test_energy_is_zero_on_a_valid_conformer_and_positive_with_finite_gradient_otherwise():
  ligand = problems.make_ligand()
  ref = jnp.asarray(ligand.references[0])
  assert bool(geometry.violations(ref, ligand.pocket, ligand.geometry)["valid"])
  assert float(geometry.flat_bottom_energy(ref, ligand.pocket, ligand.geometry)) == 0.0
  squashed = ref * 0.7
  e, g = jax.value_and_grad(lambda x: geometry.flat_bottom_energy(
      x, ligand.pocket, ligand.geometry))(squashed)
  assert float(e) > 0 and np.all(np.isfinite(np.asarray(g)))
  assert not bool(geometry.violations(squashed, ligand.pocket, ligand.geometry)["valid"])


def test_euler_with_a_traced_step_count_equals_the_python_loop():
  params = {"w": jnp.eye(3) * -0.5, "b": jnp.ones(3)}
  v = _linear_velocity(params)
  x0 = jnp.asarray([[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]])
  x = x0
  for i in range(5):
    x = x + 0.2 * v(x, jnp.full(2, i * 0.2))
  out = jax.jit(lambda z, k: losses.euler(v, z, k))(x0, 5)
  np.testing.assert_allclose(np.asarray(out), np.asarray(x), rtol=1e-5)


def test_member_step_jit_equals_eager_and_rejected_members_stay_finite(setup):
  _, k, state = setup
  eager, m_eager = k.train_step(state, None)
  jitted, m_jit = jax.jit(k.train_step)(state, None)
  for a, b in zip(jax.tree.leaves(eager.params), jax.tree.leaves(jitted.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
  assert float(m_jit["accepted_min"]) == 0.0          # the delta = 0 members
  assert np.isfinite(float(m_jit["loss_max"]))
  # A rejected member's parameters do not move (loss 0, gradient 0, Adam's update 0).
  for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(jitted.params)):
    np.testing.assert_allclose(np.asarray(a)[3], np.asarray(b)[3], atol=1e-7)


def test_members_sharded_over_8_devices_equal_one_device(setup):
  _, k, state = setup
  mesh = distributed.make_mesh()
  assert mesh.size == 8
  sharded = jax.device_put(state, NamedSharding(mesh, P("data")))
  one = jax.device_put(state, jax.devices()[0])
  step = jax.jit(k.train_step)
  out_sharded, _ = step(sharded, None)
  out_one, _ = step(one, None)
  for a, b in zip(jax.tree.leaves(out_sharded.params), jax.tree.leaves(out_one.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)


def test_pocket_hinge_matches_autodiff_of_the_plain_form():
  """The written-out gradient equals autodiff of relu(m - |x - p|) (x, pocket and margin),
  also at a conformer atom sitting exactly on a pocket point, and under jit and vmap."""
  rng = np.random.default_rng(3)
  pocket = jnp.asarray(rng.normal(size=(40, 3)) * 2.0, jnp.float32)
  x = jnp.asarray(rng.normal(size=(2, 5, 8, 3)) * 2.0, jnp.float32)
  x = x.at[0, 0, 0].set(pocket[7])                  # coincident: distance 0
  margin = jnp.asarray(2.65, jnp.float32)
  coef = jnp.asarray(rng.normal(size=(2, 5)), jnp.float32)

  def plain(x, pocket, margin):
    diff = x[..., :, None, :] - pocket
    return jax.nn.relu(margin - geometry.safe_sqrt((diff ** 2).sum(-1))).sum((-1, -2))

  for f in (plain, geometry.pocket_hinge):
    assert f(x, pocket, margin).shape == (2, 5)
  want = jax.value_and_grad(lambda *a: (coef * plain(*a)).sum(), argnums=(0, 1, 2))
  got = jax.jit(jax.value_and_grad(lambda *a: (coef * geometry.pocket_hinge(*a)).sum(),
                                   argnums=(0, 1, 2)))
  (v0, g0), (v1, g1) = want(x, pocket, margin), got(x, pocket, margin)
  np.testing.assert_allclose(float(v1), float(v0), rtol=1e-5)
  assert float(v0) != 0.0 and float(jnp.abs(g0[0]).max()) > 0
  for a, b in zip(g1, g0):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
  assert np.all(np.isfinite(np.asarray(g1[0])))      # incl. the coincident atom
  per = jax.vmap(jax.grad(lambda z: geometry.pocket_hinge(z, pocket, margin).sum()))(x)
  np.testing.assert_allclose(np.asarray(per), np.asarray(
      jax.grad(lambda z: plain(z, pocket, margin).sum())(x)), rtol=1e-4, atol=1e-4)
