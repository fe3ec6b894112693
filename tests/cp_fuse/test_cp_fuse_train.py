"""The vmapped M-model train step: equal to training each model alone, sharded == single
device, and the smoke reproduction check end to end."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlib_papers.core import distributed, train_loop
from jaxlib_papers.core.reproduce import Context
from jaxlib_papers.cp_fuse import data, fusion, kernel, models, reproduce, train
from jaxlib_papers.cp_fuse.configs.default import get_config

MODEL = models.CausalLM(vocab_size=data.VOCAB_SIZE, d_model=16, num_layers=1, num_heads=2,
                        mlp_dim=32, max_len=12)


def _kernel(num_models):
  # SGD: adam's first step is ~sign(g) and would amplify float noise of near-zero grads.
  return kernel.make_lm_kernel(MODEL, optax.sgd(0.1), num_models=num_models, seq_len=12)


def test_vmapped_step_equals_separate_models_and_sharded_equals_single_device():
  batches = np.random.default_rng(1).integers(5, data.VOCAB_SIZE, (2, 8, 2, 13)).astype(
      np.int32)
  config = get_config("smoke")
  config.loop.num_steps = 2
  runs = []
  for devices in (jax.devices()[:1], jax.devices()[:8]):
    result = train_loop.run(_kernel(2), lambda step: batches[step], config, None,
                            mesh=distributed.make_mesh(devices=devices))
    runs.append(jax.device_get(result.state.params))
  for a, b in zip(jax.tree.leaves(runs[0]), jax.tree.leaves(runs[1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  # The pair step is two independent single-model steps (same init: train_loop seeds it).
  pair = _kernel(2)
  state = jax.jit(pair.init)(jax.random.key(config.seed))
  single = _kernel(1)
  step = jax.jit(single.train_step)
  for m in range(2):
    one = jax.tree.map(lambda x, m=m: x[m:m + 1] if x.ndim else x, state)
    for i in range(2):
      one, _ = step(one, jnp.asarray(batches[i][:, m:m + 1]))
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(runs[0])):
      np.testing.assert_allclose(a[0], b[m], rtol=1e-4, atol=1e-6)
  with pytest.raises(ValueError, match="batch must be"):
    pair.train_step(state, jnp.asarray(batches[0][:, :1]))


def test_k_steps_per_call_train_like_one_step_per_call():
  # Two optimiser steps per call (one lax.scan) against one per call, same batches (SGD,
  # as above: scanned and unscanned programs may round differently).
  batches = np.random.default_rng(2).integers(5, data.VOCAB_SIZE, (4, 8, 2, 13)).astype(
      np.int32)
  config = get_config("smoke")
  config.loop.update(num_steps=4, log_every=2, checkpoint_every=4)
  lm = _kernel(2)
  one = train_loop.run(lm, lambda step: batches[step], config, None)
  scanned, source = train.steps_per_call(lm, lambda step: batches[step], 2)
  two = train_loop.run(scanned, source, config, None, steps_per_call=2)
  assert int(two.state.step) == 4 and [row["step"] for row in two.history] == [2, 4]
  for a, b in zip(jax.tree.leaves(one.state.params), jax.tree.leaves(two.state.params)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  config.train.steps_per_call = 3
  with pytest.raises(ValueError, match="multiple"):
    train.run(config, None, evaluate=False)


def test_smoke_reproduction_check(tmp_path):
  claims = reproduce.check(Context(preset="smoke", report_dir=tmp_path))
  assert len(claims) == 10
  assert all(c.ours and c.paper for c in claims)
  by_name = {c.claim.split(":")[0]: c for c in claims}
  # Properties that hold at any training length: the grid never beats the exact solver,
  # and the exact solver balances the two objectives at interior steps.
  assert by_name["T5"].holds and by_name["T2"].holds
  assert (tmp_path / "cp_fuse_summary.png").stat().st_size > 1000
  assert "| cp_fuse |" in (tmp_path / "cp_fuse_tables.md").read_text()


def test_cached_step_log_probs_and_decode_equal_the_whole_buffer_forms():
  """The key-value cache gives the whole-buffer log-probabilities position by position,
  and kernel.decode_cached the same decode as kernel.decode (greedy and sampled, every rule,
  the n-gram blocker on), to float rounding."""
  lm = _kernel(2)
  params = jax.jit(lm.init)(jax.random.key(3)).params
  # Scaled-up weights: an untrained model's log-probabilities are nearly flat (near-ties).
  params = jax.tree.map(lambda x: 4.0 * x, params)
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, data.VOCAB_SIZE, (3, 12)).astype(np.int32)
  full = lm.log_probs(params, jnp.broadcast_to(tokens, (2, *tokens.shape)))  # [2, 3, 12, V]
  cache, steps = lm.init_cache(3), []
  for t in range(12):
    logp, cache = lm.step_log_probs(params, cache, jnp.broadcast_to(tokens[:, t], (2, 3)))
    steps.append(logp)
  np.testing.assert_allclose(np.stack(steps, axis=2), full, rtol=1e-5, atol=1e-5)

  prompts = jnp.asarray(tokens[:, :4])
  settings = kernel.DecodeSettings(8, fusion.official_grid(10),
                                   jnp.asarray(tokens[:2, 3:6]), 40)
  plain = jax.jit(lambda p, x, k, o: kernel.decode(lm.log_probs, p, x, k, o, settings))
  cached = jax.jit(lambda p, x, k, o: kernel.decode_cached(
      lm.step_log_probs, lm.init_cache(x.shape[0]), p, x, k, o, settings))
  for rule, fixed in ((kernel.RULE_FIXED, (1.0, 0.0)), (kernel.RULE_GRID, (0.0, 0.0)),
                      (kernel.RULE_EXACT, (0.0, 0.0))):
    for temperature in (0.0, 1.0):
      opts = kernel.options(rule, fixed, temperature, True)
      a = plain(params, prompts, jax.random.key(1), opts)
      b = cached(params, prompts, jax.random.key(1), opts)
      np.testing.assert_array_equal(a.tokens, b.tokens)
      for x, y in zip(a[1:], b[1:]):  # weights up to 10 amplify the log-probs' rounding
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-3)
