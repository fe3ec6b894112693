"""The vmapped CE kernel: jit == eager, sharded runs == one device, resume, gradients."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jaxlib_papers.core import blocks, distributed, precision, train_loop
from jaxlib_papers.identifiability import data as D
from jaxlib_papers.identifiability import kernel as K

SETTINGS = K.Settings(dim=3, num_classes=4, num_indices=16, objective="diet", hidden=(8,),
                      batch_size=32, steps_per_call=2, mixing_candidates=16)
VARIANTS = K.make_variants(4, (10.0,), (False, True))


@pytest.fixture(scope="module")
def kern():
  return K.make_kernel(SETTINGS, VARIANTS)


def _close(a, b, **kw):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), **kw)


def test_init_shapes_and_variants(kern):
  state = kern.init(jax.random.key(0))
  assert state.params["head"].shape == (8, 16, 3)
  assert state.problem.centers.shape == (8, 4, 3)
  # the two variants of one seed share the problem; different seeds do not
  _close(state.problem.mixing[0], state.problem.mixing[1])
  assert not np.allclose(state.problem.mixing[0], state.problem.mixing[2])
  np.testing.assert_array_equal(state.normalize_head, [False, True] * 4)


def test_jit_equals_eager_and_head_rows_renormalised(kern):
  state = kern.init(jax.random.key(0))
  eager_state, eager_metrics = kern.train_step(state, None)
  jit_state, jit_metrics = jax.jit(kern.train_step)(state, None)
  _close(eager_state, jit_state, rtol=2e-4, atol=2e-5)
  assert float(eager_metrics["loss"]) == pytest.approx(float(jit_metrics["loss"]), rel=1e-5)
  assert int(jit_state.step[0]) == SETTINGS.steps_per_call
  # before every step the normalised variants' rows are put back on the sphere, so after
  # one Adam step (lr 1e-3) their norms stay within the step size of 1
  norms = np.linalg.norm(np.asarray(jit_state.params["head"]), axis=-1)
  assert np.all(np.abs(norms[1::2] - 1.0) < 5e-3)
  assert np.all(np.abs(norms[0::2] - 1.0) > 0.05)


def test_one_run_alone_equals_its_member_of_the_vmapped_kernel(kern):
  state = kern.init(jax.random.key(0))
  out, metrics = jax.jit(kern.train_step)(state, None)
  assert sorted(metrics) == ["loss", "loss_max", "r2_batch", "r2_batch_min", "rejected"]
  update = blocks.gradient_step(functools.partial(K.cross_entropy, settings=SETTINGS),
                                K.optimizer(SETTINGS), has_aux=True)
  run = jax.tree.map(lambda leaf: leaf[1], state)
  losses = []
  for _ in range(SETTINGS.steps_per_call):
    run, step_metrics = jax.jit(functools.partial(K.train_step_run, SETTINGS, update))(run)
    losses.append(float(step_metrics["loss"]))
  _close(jax.tree.map(lambda leaf: leaf[1], out), run, rtol=2e-4, atol=2e-5)
  assert float(metrics["loss_max"]) >= np.mean(losses) - 1e-5


def test_runs_sharded_over_8_devices_equal_one_device(kern):
  assert len(jax.devices()) == 8
  state = kern.init(jax.random.key(1))
  mesh8 = distributed.make_mesh()
  sharded = jax.device_put(state, NamedSharding(mesh8, PartitionSpec("data")))
  out8, _ = jax.jit(kern.train_step)(sharded, None)
  one = jax.device_put(state, jax.devices()[0])
  out1, _ = jax.jit(kern.train_step)(one, None)
  _close(out8, out1, rtol=1e-5, atol=1e-6)


def test_head_per_member_is_bitwise_the_batched_head():
  """The head's CE one run at a time (the default) trains exactly as the batched head.

  At the presets' head shapes (d = 5, K = 100 or 1000); at d = 3, K = 16, batch 32 XLA:CPU
  rounds the batched and the per-run head differently (last bits).
  """
  settings = SETTINGS._replace(dim=5, num_indices=100, batch_size=64)
  kernels = [K.make_kernel(settings._replace(head_per_member=p, runs_in_sequence=False),
                           VARIANTS) for p in (True, False)]
  state = kernels[0].init(jax.random.key(2))
  outs = [jax.jit(k.train_step)(state, None)[0] for k in kernels]
  for x, y in zip(*(jax.tree.leaves(o) for o in outs), strict=True):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    assert np.array_equal(x, y)


def test_runs_in_sequence_train_as_the_batched_runs():
  """The runs one after another (the default on one core per CPU device) or batched under
  vmap: the same training up to float rounding after a call of Adam steps (the batched dots
  round differently); the default is the core rule's."""
  kernels = [K.make_kernel(SETTINGS._replace(runs_in_sequence=s), VARIANTS)
             for s in (True, False)]
  state = kernels[0].init(jax.random.key(3))
  (seq, m_seq), (bat, m_bat) = (jax.jit(k.train_step)(state, None) for k in kernels)
  _close(seq, bat, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(m_seq["loss"], m_bat["loss"], rtol=1e-5)
  assert (K.validate_settings(SETTINGS).runs_in_sequence
          == blocks.members_in_sequence_by_default())


def test_resume_equals_uninterrupted(kern, tmp_path):
  k = SETTINGS.steps_per_call   # loop steps count Adam steps, k per call
  config = ml_collections.ConfigDict(
      {"seed": 3, "loop": {"num_steps": 4 * k, "log_every": 2 * k,
                           "checkpoint_every": 2 * k, "quiet": True}})
  straight = train_loop.run(kern, None, config, None, steps_per_call=k)
  half = ml_collections.ConfigDict(config.to_dict())
  half.loop.num_steps = 2 * k
  train_loop.run(kern, None, half, tmp_path / "w", steps_per_call=k)
  resumed = train_loop.run(kern, None, config, tmp_path / "w", steps_per_call=k)
  assert resumed.resumed_from == 2 * k
  assert [row["step"] for row in straight.history] == [k, 2 * k, 3 * k, 4 * k]
  _close(straight.state, resumed.state, rtol=1e-6, atol=1e-7)


def test_head_gradient_matches_finite_differences_float64():
  """d CE / d W by autodiff against central differences (float64)."""
  with precision.enable_x64():
    rng = np.random.default_rng(0)
    feats = jnp.asarray(rng.normal(size=(16, 3)))
    labels = jnp.asarray(rng.integers(0, 5, 16))
    params = {"head": jnp.asarray(rng.normal(size=(5, 3))),
              "log_temperature": jnp.asarray(0.7)}
    settings = SETTINGS._replace(normalize_features=True)

    def loss(p):
      logits = K.logits_fn(settings, feats, p, jnp.asarray(True))
      return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))

    grads = jax.grad(loss)(params)
    eps = 1e-6
    for name, index in (("head", (2, 1)), ("log_temperature", ())):
      plus = jax.tree.map(lambda x: x, params)
      minus = jax.tree.map(lambda x: x, params)
      plus[name] = params[name].at[index].add(eps)
      minus[name] = params[name].at[index].add(-eps)
      fd = (loss(plus) - loss(minus)) / (2 * eps)
      assert float(grads[name][index]) == pytest.approx(float(fd), rel=1e-6, abs=1e-9)


def test_bad_input():
  with pytest.raises(ValueError, match="objective"):
    K.make_kernel(SETTINGS._replace(objective="simclr"), VARIANTS)
  with pytest.raises(ValueError, match="dim"):
    K.make_kernel(SETTINGS._replace(dim=1), VARIANTS)
  with pytest.raises(ValueError, match="kappas"):
    K.make_variants(2, (), (False,))
  with pytest.raises(ValueError, match="num_seeds"):
    K.make_variants(0, (1.0,))
  with pytest.raises(ValueError, match="conditional"):
    K.make_kernel(SETTINGS._replace(conditional="student"), VARIANTS)


def test_supervised_labels_are_classes():
  batch = D.Batch(jnp.zeros((3, 2)), jnp.zeros((3, 2)), jnp.array([5, 6, 7]),
                  jnp.array([1, 2, 3]), jnp.int32(0))
  np.testing.assert_array_equal(K.target_labels(SETTINGS, batch), [5, 6, 7])
  sup = SETTINGS._replace(objective="supervised")
  np.testing.assert_array_equal(K.target_labels(sup, batch), [1, 2, 3])
  assert sup.num_labels == 4 and SETTINGS.num_labels == 16
