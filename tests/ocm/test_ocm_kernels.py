"""Kernel behaviour: jit == eager, frozen backbone, zero-init heads, sharding, bad input."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxlib_papers.core import distributed, train_loop
from jaxlib_papers.ocm import covariance, data, diffusion, evaluate, gmm, kernel, models, train
from jaxlib_papers.ocm.configs.default import get_config

D = 2


@pytest.fixture(scope="module")
def setup():
  schedule = diffusion.make_schedule("linear", 1000)
  model = models.MLPBackbone(width=16, depth=1, time_embed_dim=8)
  head = models.VectorHead(out_dim=D, hidden=(16,))
  example = jnp.zeros((2, D))
  dsm = kernel.make_dsm_kernel(model, schedule, optax.adam(1e-2), example, ema_decay=0.9)
  state = dsm.init(jax.random.key(0))
  heads = kernel.make_head_kernel(kernel.HeadSettings(model, head, schedule, num_probes=2),
                                  optax.adam(1e-2), example, state.params)
  batch = data.mixture_source(gmm.ring(), 16, 0)(0)
  head_state = heads.init(jax.random.key(1))
  return dict(schedule=schedule, model=model, head=head, dsm=dsm, heads=heads,
              dsm_state=state, batch=batch, example=example, head_state=head_state,
              head_jit=jax.jit(heads.train_step)(head_state, batch))


def _close(a, b, rtol=2e-5, atol=1e-6):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    if jnp.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_ocm_target_jit_equals_eager(setup):
  # The OCM probe target (one linearisation of the eps network, two probes), eager and jitted.
  state = setup["head_state"]
  t = jnp.arange(1, 17) * 60
  fn = lambda x: setup["model"].apply(state.backbone, x, t)
  x_t = jnp.asarray(setup["batch"])
  sigma = diffusion.marginal(setup["schedule"], t)[1][:, None]
  probes = covariance.rademacher_probes(jax.random.key(3), 2, x_t.shape)
  eager = covariance.ocm_target(fn, x_t, sigma, probes)
  _close(eager, jax.jit(covariance.ocm_target, static_argnums=0)(fn, x_t, sigma, probes))
  assert int(setup["head_jit"][0].step) == 1


def test_heads_zero_init_and_frozen_backbone(setup):
  state = setup["head_state"]
  _, features = setup["model"].apply(state.backbone, jnp.ones((3, D)), jnp.array([1, 5, 900]))
  for name in covariance.HEADS:
    np.testing.assert_array_equal(setup["head"].apply(state.params[name], features), 0.0)
  new_state, metrics = setup["head_jit"]
  _close(new_state.backbone, setup["dsm_state"].params, rtol=0, atol=0)
  assert set(metrics) == {"loss", "loss_ocm", "loss_sn", "loss_npr"}
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new_state.params,
                       state.params)
  assert max(jax.tree.leaves(moved)) > 0


def test_head_step_gathers_the_frozen_time_features(setup):
  # The head state holds the backbone's time features at every t (computed once: the
  # backbone never changes); a step gathering rows of that table moves the heads as the step
  # that runs the time layers per sample. A UNet backbone has no table and keeps its path.
  state = setup["head_state"]
  table = models.time_feature_table(setup["model"], state.backbone, 1000)
  assert len(state.time_table) == 2 and state.time_table[0].shape == (1001, 16)
  _close(state.time_table, table, rtol=0, atol=0)
  gathered, metrics = setup["head_jit"]
  per_sample, metrics_b = jax.jit(setup["heads"].train_step)(
      state._replace(time_table=None), setup["batch"])
  _close(gathered.params, per_sample.params, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(metrics["loss"], metrics_b["loss"], rtol=1e-6)
  unet = models.make_backbone("unet", base_channels=4, channel_mults=(1,), blocks_per_level=1,
                              groups=2)
  x = jnp.zeros((1, 4, 4, 1))
  assert models.time_feature_table(unet, unet.init(jax.random.key(0), x, jnp.ones(1)), 9) is None


def _dsm_chunked(setup, steps_per_call):
  return kernel.make_dsm_kernel(setup["model"], setup["schedule"], optax.adam(1e-2),
                                setup["example"], ema_decay=0.9, steps_per_call=steps_per_call)


def test_steps_per_call_equals_single_steps(setup):
  # Two steps as one scanned call == two calls of one step, bit for bit.
  base = data.mixture_source(gmm.ring(), 16, 0)
  state = setup["dsm_state"]
  one = jax.jit(setup["dsm"].train_step)
  single, metrics = one(state, base(0))
  single, metrics_b = one(single, base(1))
  chunked, chunk_metrics = jax.jit(_dsm_chunked(setup, 2).train_step)(
      state, np.stack([base(0), base(1)], axis=1))
  _close(chunked, single, rtol=0, atol=0)
  np.testing.assert_allclose(chunk_metrics["loss"], (metrics["loss"] + metrics_b["loss"]) / 2,
                             rtol=1e-6)


def test_sharded_equals_single_device(setup):
  config = ml_collections.ConfigDict(
      dict(seed=0, loop=dict(num_steps=4, log_every=2, checkpoint_every=4, quiet=True)))
  base = data.mixture_source(gmm.ring(), 16, 0)
  source = lambda call: np.stack([base(2 * call), base(2 * call + 1)], axis=1)
  dsm = _dsm_chunked(setup, 2)
  many = train_loop.run(dsm, source, config, None, steps_per_call=2)
  one = train_loop.run(dsm, source, config, None, steps_per_call=2,
                       mesh=distributed.make_mesh(devices=jax.devices()[:1]))
  assert len(jax.devices()) == 8
  # DSM chunks of 2 steps ([B, 2, D] batches) on 8 devices == on one device.
  np.testing.assert_allclose([r["loss"] for r in many.history],
                             [r["loss"] for r in one.history], rtol=1e-5)
  _close(many.state.params, one.state.params, rtol=1e-4, atol=1e-6)


def test_bad_input(setup):
  with pytest.raises(ValueError, match="batch must be"):
    setup["dsm"].train_step(setup["dsm_state"], jnp.zeros((4, 3)))
  with pytest.raises(ValueError, match="batch must be"):  # [B, 3 steps, D] for 2 per call
    _dsm_chunked(setup, 2).train_step(setup["dsm_state"], jnp.zeros((4, 3, D)))
  settings = kernel.HeadSettings(setup["model"], setup["head"], setup["schedule"])
  for bad, match in ((dict(heads=("bogus",)), "heads"), (dict(num_probes=0), "num_probes"),
                     (dict(param="linear", loss="nll"), "positive")):
    with pytest.raises(ValueError, match=match):
      kernel.make_head_kernel(settings._replace(**bad), optax.adam(1.0), setup["example"],
                              setup["dsm_state"].params)
  methods = kernel.Methods(setup["model"], setup["dsm_state"].params)
  with pytest.raises(ValueError, match="method must be one of"):
    kernel.make_predictor(methods, "cold", setup["schedule"])
  with pytest.raises(ValueError, match="eta > 0"):
    diffusion.nelbo(lambda x, t: (x, 0.0), setup["schedule"],
                    diffusion.skip_timesteps(3, 1000), jnp.zeros((2, D)), jax.random.key(0),
                    settings=diffusion.BoundSettings(eta=0.0))
  with pytest.raises(ValueError, match="means must be"):
    gmm.make_mixture([1.0], [0.0, 1.0], 0.1)
  # The "jacobian" diagnostic needs d jvps per x_t: vectors only, refused before training.
  evaluate.check_methods(("ocm", "jacobian", "exact"), (16,))
  with pytest.raises(ValueError, match="unknown"):
    evaluate.check_methods(("ocm", "cold"), (16,))
  config = get_config("smoke")
  config.model.kind = "unet"
  config.eval.methods = ("ocm", "jacobian")
  with pytest.raises(ValueError, match=r"'jacobian'.*d = 64 jvps.*vector data only"):
    train.run(config, None, dataset=np.zeros((16, 8, 8, 1), np.float32))
