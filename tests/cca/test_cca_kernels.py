"""CCA kernels: the loss against a hand computation, gradients in float64, samplers, sharding."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxlib_papers.cca import data, kernel, models, toy
from jaxlib_papers.core import distributed, train_loop
from jaxlib_papers.core.precision import enable_x64

TINY = models.ARTransformer(vocab_size=3, num_classes=10, length=6, width=8, depth=1, heads=2,
                            mlp=16)


def _tiny_params(seed=0):
  return TINY.init(jax.random.key(seed), jnp.zeros((1,), jnp.int32), jnp.zeros((1, 6), jnp.int32))


def _toy_batch(seed, batch=16, num_classes=3):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.integers(0, 2, (batch, 2)), jnp.int32),
          jnp.asarray(rng.integers(0, num_classes, batch), jnp.int32))


def _random_tabular(seed, num_classes=4):
  rng = np.random.default_rng(seed)
  return {"A": jnp.asarray(rng.normal(size=(num_classes, 2))),
          "B": jnp.asarray(rng.normal(size=(num_classes, 2, 2)))}


def _numpy_loss(theta, phi, tokens, labels, key, lam, settings):
  """The official formula written out with numpy on the pairs the kernel draws."""
  pos_labels, neg_labels, _, positive = map(np.asarray, kernel.negative_labels(
      labels, key, settings))
  lp = lambda p, c: np.asarray(toy.tabular_logprob(p, jnp.asarray(c), tokens))
  g_pos = lp(theta, pos_labels) - lp(phi, pos_labels)
  g_neg = lp(theta, neg_labels) - lp(phi, neg_labels)
  logsig = lambda x: -np.logaddexp(0.0, -x)
  b = settings.beta
  w = np.where(positive, 1.0, lam)
  e = np.where(positive, 1.0, -1.0)
  if settings.loss == "cca":
    return (-logsig(b * g_pos).mean() - (w * logsig(e * b * g_neg)).mean()) / max(lam, 1.0)
  if settings.loss == "unlearn":
    return (-g_pos.mean() - (w * e * g_neg).mean()) / max(lam, 1.0)
  return -logsig(b * (g_pos - g_neg)).mean()


@pytest.mark.parametrize("loss", kernel.LOSSES)
@pytest.mark.parametrize("negatives", kernel.NEGATIVES)
def test_loss_matches_numpy_formula(loss, negatives):
  settings = kernel.AlignSettings(loss=loss, beta=0.7, uncond_ratio=0.3, negatives=negatives,
                                  null_label=3)
  with enable_x64():
    theta, phi = _random_tabular(0), _random_tabular(1)
    tokens, labels = _toy_batch(2)
    key = jax.random.key(3)
    got, _ = kernel.alignment_loss(toy.tabular_logprob, theta, phi, tokens, labels, key, 5.0,
                                   settings)
    want = _numpy_loss(theta, phi, tokens, labels, key, 5.0, settings)
  np.testing.assert_allclose(float(got), want, rtol=1e-12)


def test_step_zero_loss_is_log2_times_mean_weight():
  """theta = phi: g = 0, so L = log 2 (1 + E[w]) / max(lambda, 1) (the brief's check)."""
  settings = kernel.AlignSettings(beta=0.1, uncond_ratio=0.1, negatives="roll", null_label=10)
  params = _random_tabular(0, num_classes=11)
  tokens, labels = _toy_batch(1, batch=64, num_classes=10)
  key = jax.random.key(1)
  loss_fn = jax.jit(lambda lam: kernel.alignment_loss(toy.tabular_logprob, params, params,
                                                      tokens, labels, key, lam, settings))
  positive = np.asarray(kernel.negative_labels(labels, key, settings)[3])
  assert 0 < positive.mean() < 1
  for lam in (0.0, 1.0, 30.0):
    loss, aux = loss_fn(lam)
    mean_w = np.mean(np.where(positive, 1.0, lam))
    np.testing.assert_allclose(float(loss), np.log(2) * (1 + mean_w) / max(lam, 1), rtol=1e-6)
    assert float(aux["gap_pos"]) == 0.0


def test_negatives_roll_collisions_and_shuffle():
  labels = jnp.asarray([1, 1, 2, 3, 3, 1], jnp.int32)
  no_null = kernel.AlignSettings(uncond_ratio=0.0, negatives="roll", null_label=10)
  pos, neg, uncond, positive = kernel.negative_labels(labels, jax.random.key(0), no_null)
  np.testing.assert_array_equal(neg, [1, 2, 3, 3, 1, 1])
  np.testing.assert_array_equal(positive, [True, False, False, True, False, True])
  assert not np.any(uncond)
  shuffled = no_null._replace(negatives="shuffle")
  _, neg, _, positive = kernel.negative_labels(labels, jax.random.key(0), shuffled)
  np.testing.assert_array_equal(np.sort(neg), np.sort(labels))
  assert not np.any(positive)
  # Unconditional rows: both labels null, counted positive.
  always = kernel.AlignSettings(uncond_ratio=0.999999, negatives="roll", null_label=10)
  pos, neg, uncond, positive = kernel.negative_labels(labels, jax.random.key(0), always)
  assert np.all(pos == 10) and np.all(neg == 10) and np.all(positive)


def test_gradient_matches_finite_differences_float64():
  settings = kernel.AlignSettings(loss="cca", beta=0.5, uncond_ratio=0.2, negatives="roll",
                                  null_label=3)
  with enable_x64():
    theta, phi = _random_tabular(4), _random_tabular(5)
    tokens, labels = _toy_batch(6)
    key = jax.random.key(7)
    f = lambda p: kernel.alignment_loss(toy.tabular_logprob, p, phi, tokens, labels, key, 3.0,
                                        settings)[0]
    grad = jax.grad(f)(theta)
    eps = 1e-6
    for name in ("A", "B"):
      flat = np.asarray(theta[name]).reshape(-1)
      for i in range(0, flat.size, 3):
        bump = np.zeros_like(flat)
        bump[i] = eps
        up = dict(theta, **{name: jnp.asarray((flat + bump).reshape(theta[name].shape))})
        down = dict(theta, **{name: jnp.asarray((flat - bump).reshape(theta[name].shape))})
        fd = (float(f(up)) - float(f(down))) / (2 * eps)
        np.testing.assert_allclose(np.asarray(grad[name]).reshape(-1)[i], fd, atol=1e-8)
    # No gradient reaches the reference.
    ref_grad = jax.grad(lambda r: kernel.alignment_loss(
        toy.tabular_logprob, theta, r, tokens, labels, key, 3.0, settings)[0])(phi)
    assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(ref_grad))


def test_loss_jit_equals_eager():
  settings = kernel.AlignSettings(beta=0.3, negatives="shuffle", null_label=3)
  theta, phi = _random_tabular(8), _random_tabular(9)
  tokens, labels = _toy_batch(10)
  fn = lambda p, k: kernel.alignment_loss(toy.tabular_logprob, p, phi, tokens, labels, k, 10.0,
                                          settings)[0]
  key = jax.random.key(2)
  np.testing.assert_allclose(float(jax.jit(fn)(theta, key)), float(fn(theta, key)), rtol=1e-5)


def test_cached_decode_matches_teacher_forcing():
  params = _tiny_params(3)
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(0, 3, (4, 6)), jnp.int32)
  labels = jnp.asarray([0, 4, 9, 10], jnp.int32)
  full = jax.jit(TINY.apply)(params, labels, tokens)

  @jax.jit
  def decode_all(params):
    def body(cache, t):
      previous = jnp.where(t == 0, 0, tokens[:, jnp.maximum(t - 1, 0)])
      logits, cache = TINY.apply(params, labels, previous, t, cache,
                                 method=models.ARTransformer.decode)
      return cache, logits
    return jax.lax.scan(body, models.init_cache(TINY, 4), jnp.arange(6))[1]

  np.testing.assert_allclose(np.swapaxes(decode_all(params), 0, 1), full, atol=1e-5)


def test_decode_cache_holds_keys_and_values_position_last():
  """After decoding every position, the cache [B, H, Dh, L] holds the keys and values
  [B, L, H, Dh] of the teacher-forced pass, moved to position last."""
  params = _tiny_params(6)
  rng = np.random.default_rng(2)
  tokens = jnp.asarray(rng.integers(0, 3, (4, 6)), jnp.int32)
  labels = jnp.asarray([1, 3, 10, 7], jnp.int32)

  @jax.jit
  def final_cache(params):
    def body(cache, t):
      previous = jnp.where(t == 0, 0, tokens[:, jnp.maximum(t - 1, 0)])
      return TINY.apply(params, labels, previous, t, cache,
                        method=models.ARTransformer.decode)[1], None
    return jax.lax.scan(body, models.init_cache(TINY, 4), jnp.arange(6))[0]

  cache = final_cache(params)
  _, state = TINY.apply(params, labels, tokens, capture_intermediates=True)
  (_, (k, v)), = state["intermediates"]["blocks_0"]["__call__"]
  assert cache.keys[0].shape == (4, 2, 4, 6)
  np.testing.assert_allclose(cache.keys[0], jnp.moveaxis(k, 1, -1), atol=1e-6)
  np.testing.assert_allclose(cache.values[0], jnp.moveaxis(v, 1, -1), atol=1e-6)


def test_samplers_cache_recompute_and_scale_zero_agree():
  params = _tiny_params(4)
  labels = jnp.asarray(np.arange(64) % 10, jnp.int32)
  key = jax.random.key(5)
  base = np.asarray(jax.jit(kernel.make_sampler(TINY, guided=False))(params, labels, key))
  assert base.shape == (64, 6) and base.min() >= 0 and base.max() < 3
  recompute = jax.jit(kernel.make_sampler(TINY, guided=True, use_cache=False))
  cached = jax.jit(kernel.make_sampler(TINY, guided=True, use_cache=True))
  # Same keys: same tokens up to float rounding of the logits.
  assert np.mean(np.asarray(recompute(params, labels, key, 0.0)) == base) > 0.99
  assert np.mean(np.asarray(recompute(params, labels, key, 2.0))
                 == np.asarray(cached(params, labels, key, 2.0))) > 0.99
  # A strong guidance scale changes the samples.
  assert np.mean(np.asarray(cached(params, labels, key, 5.0)) == base) < 0.99


def test_bad_settings_and_inputs_raise():
  refs = jax.tree.map(lambda x: x[None], _tiny_params())
  logprob = kernel.sequence_logprob(TINY)
  with pytest.raises(ValueError, match="settings.loss"):
    kernel.make_align_kernel(logprob, optax.sgd(0.1), kernel.AlignSettings(loss="ppo"), refs,
                             [1.0])
  with pytest.raises(ValueError, match="settings.negatives"):
    kernel.make_align_kernel(logprob, optax.sgd(0.1),
                             kernel.AlignSettings(negatives="randperm"), refs, [1.0])
  with pytest.raises(ValueError, match="lambdas"):
    kernel.make_align_kernel(logprob, optax.sgd(0.1), kernel.AlignSettings(), refs, [-1.0])
  with pytest.raises(ValueError, match="leading run axis"):
    kernel.make_align_kernel(logprob, optax.sgd(0.1), kernel.AlignSettings(), refs, [1.0, 2.0])
  tk = kernel.make_pretrain_kernel(TINY, optax.sgd(0.1), num_runs=2)
  with pytest.raises(ValueError, match="tokens"):
    tk.train_step(None, {"tokens": jnp.zeros((4, 6), jnp.int32),
                         "labels": jnp.zeros((4,), jnp.int32)})
  with pytest.raises(ValueError, match="levels"):
    data.quantise(np.zeros(3), 1)


def _align_run(mesh, num_steps=3):
  """Two CCA runs (lambda 1 and 30) of the toy model from one reference, rolled negatives."""
  refs = jax.tree.map(lambda x: np.repeat(np.asarray(x, np.float32)[None], 2, 0),
                      toy.tabular_params(toy.TOY_CONDITIONALS))
  settings = kernel.AlignSettings(beta=1.0, uncond_ratio=0.1, negatives="roll", null_label=1)
  # SGD: Adam's normalisation would amplify float-rounding differences of near-zero grads.
  tk = kernel.make_align_kernel(toy.tabular_logprob, optax.sgd(0.5), settings, refs, [1., 30.])
  def source(step):
    rng = np.random.default_rng(step)
    return {"tokens": rng.integers(0, 2, (16, 2, 2)).astype(np.int32),
            "labels": rng.integers(0, 2, (16, 2)).astype(np.int32)}
  config = ml_collections.ConfigDict({"seed": 0, "loop": {"num_steps": num_steps,
                                                          "quiet": True}})
  return train_loop.run(tk, source, config, None, mesh=mesh)


def test_align_sharded_equals_single_device():
  assert jax.device_count() == 8
  single = _align_run(distributed.make_mesh(devices=jax.devices()[:1]))
  sharded = _align_run(distributed.make_mesh())
  for a, b in zip(jax.tree.leaves(single.state.params), jax.tree.leaves(sharded.state.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  # Training moved theta; the reference stayed put.
  moved = jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), single.state.params,
                       single.state.reference)
  assert max(jax.tree.leaves(moved)) > 1e-3
  np.testing.assert_allclose(single.state.reference["A"][0],
                             toy.tabular_params(toy.TOY_CONDITIONALS)["A"], atol=1e-6)


def test_epoch_source_is_deterministic_and_covers_each_epoch():
  tokens = np.arange(40 * 2).reshape(40, 2).astype(np.int32)
  labels = np.arange(40).astype(np.int32) % 10
  source = data.epoch_source(tokens, labels, 8, [0, 7])
  seen = np.concatenate([source(s)["tokens"][:, 1, 0] for s in range(5)])
  assert sorted(seen.tolist()) == sorted(tokens[:, 0].tolist())   # one full epoch, run 1
  np.testing.assert_array_equal(source(3)["labels"], source(3)["labels"])
  assert not np.array_equal(source(0)["tokens"][:, 0], source(0)["tokens"][:, 1])
  digits = data.load(5)
  assert digits.train_tokens.shape == (1437, 64) and digits.test_tokens.shape == (360, 64)
  assert digits.train_tokens.max() == 4 and np.bincount(digits.test_labels).min() >= 35
