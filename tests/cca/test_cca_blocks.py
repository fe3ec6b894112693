"""The kernels on core.blocks against the hand-written steps they replaced (bit for bit),
and the stages' resume fingerprints against the hand-wired stage configs they replaced."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlib_papers.cca import kernel, models, toy, train
from jaxlib_papers.cca.configs.default import get_config
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import stages

TINY = models.ARTransformer(vocab_size=3, num_classes=10, length=6, width=8, depth=1, heads=2,
                            mlp=16)


def _batch(seed, runs, length, vocab, classes, batch=8):
  rng = np.random.default_rng(seed)
  return {"tokens": jnp.asarray(rng.integers(0, vocab, (batch, runs, length)), jnp.int32),
          "labels": jnp.asarray(rng.integers(0, classes, (batch, runs)), jnp.int32)}


def _per_run(batch):
  return jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), batch)


def _host(x):
  return np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
                    else x)


def _assert_same(a, b):
  a, b = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(a) == len(b)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(_host(x), _host(y))


def _runs(one, sequential):
  """The hand-written step over the runs: batched (vmap) or one after another (lax.map)."""
  if sequential:
    return lambda state, batch: jax.lax.map(lambda sb: one(*sb), (state, batch))
  return jax.vmap(one)


@pytest.mark.parametrize("sequential", [False, True])
def test_pretrain_kernel_equals_the_hand_written_step(sequential):
  tx = optax.adamw(1e-2)
  tk = kernel.make_pretrain_kernel(TINY, tx, num_runs=2, label_dropout=0.3,
                                   runs_in_sequence=sequential)
  logprob = kernel.sequence_logprob(TINY)

  def old_one(state, batch):
    key, sub = jax.random.split(state.key)
    loss, grads = jax.value_and_grad(
        lambda p: kernel.pretrain_loss(logprob, p, batch["tokens"], batch["labels"], sub,
                                       kernel.PretrainSettings(0.3, 10)))(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return (kernel.PretrainState(state.step + 1, optax.apply_updates(state.params, updates),
                                 opt_state, key), loss)

  def old_step(state, batch):
    state, losses = _runs(old_one, sequential)(state, _per_run(batch))
    return state, {"loss": jnp.mean(losses), "loss_max": jnp.max(losses)}

  state = jax.jit(tk.init)(jax.random.key(0))
  new, old = state, state
  for i in range(3):
    new, m_new = jax.jit(tk.train_step)(new, _batch(i, 2, 6, 3, 10))
    old, m_old = jax.jit(old_step)(old, _batch(i, 2, 6, 3, 10))
    _assert_same(m_new, m_old)
  _assert_same(new, old)


@pytest.mark.parametrize("sequential", [False, True])
def test_align_kernel_equals_the_hand_written_step(sequential):
  refs = jax.tree.map(lambda x: np.repeat(np.asarray(x, np.float32)[None], 2, 0),
                      toy.tabular_params(toy.TOY_CONDITIONALS))
  settings = kernel.AlignSettings(beta=1.0, uncond_ratio=0.2, negatives="roll", null_label=1)
  tx = optax.adam(0.05)
  tk = kernel.make_align_kernel(toy.tabular_logprob, tx, settings, refs, [1.0, 30.0],
                                runs_in_sequence=sequential)

  def old_one(state, batch):
    key, sub = jax.random.split(state.key)
    (loss, aux), grads = jax.value_and_grad(kernel.alignment_loss, argnums=1, has_aux=True)(
        toy.tabular_logprob, state.params, state.reference, batch["tokens"], batch["labels"],
        sub, state.lam, settings)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return (state._replace(step=state.step + 1, params=optax.apply_updates(state.params,
                                                                           updates),
                           opt_state=opt_state, key=key), {"loss": loss, **aux})

  def old_step(state, batch):
    state, metrics = _runs(old_one, sequential)(state, _per_run(batch))
    return state, jax.tree.map(jnp.mean, metrics)

  state = jax.jit(tk.init)(jax.random.key(1))
  want = kernel.AlignState(jnp.zeros(2, jnp.int32), refs, refs, jnp.asarray([1.0, 30.0]),
                           jax.vmap(tx.init)(refs), jax.random.split(jax.random.key(1), 2))
  _assert_same(state, want)
  new, old = state, state
  for i in range(3):
    new, m_new = jax.jit(tk.train_step)(new, _batch(i, 2, 2, 2, 2, batch=16))
    old, m_old = jax.jit(old_step)(old, _batch(i, 2, 2, 2, 2, batch=16))
    assert list(m_new) == list(m_old)
    _assert_same(m_new, m_old)
  _assert_same(new, old)


def _old_stage_configs(config):
  """The two stage configs as train.py wired them before core.stages."""
  kw = {"num_seeds": config.num_seeds}
  pretrain = config_lib.stage_config(config, "pretrain", groups=("data", "model", "pretrain"),
                                     loop=config.loop.to_dict(), **kw)
  loop = dict(config.align_loop.to_dict(), num_steps=44)
  align = config_lib.stage_config(config, "align", groups=("data", "model", "pretrain",
                                                           "align"), loop=loop, **kw)
  align.pretrain_steps = int(config.loop.num_steps)
  align.align.lambdas = tuple(float(x) for x in config.align.lambdas)
  return pretrain, align


def test_stage_fingerprints_and_loops_are_unchanged():
  for preset in ("smoke", "cpu", "full"):
    config = get_config(preset)
    old = _old_stage_configs(config)
    cfg = train.stages_config(config)
    pre = stages.Stage("pretrain", None, int(config.loop.num_steps),
                       groups=train.PRETRAIN_GROUPS)
    ali = stages.Stage("align", None, 44, groups=train.ALIGN_GROUPS,
                       loop=config.align_loop.to_dict())
    for want, stage in zip(old, (pre, ali)):
      got = config_lib.stage_config(cfg, stage.name, groups=stage.groups,
                                    loop=stages.stage_loop(cfg, stage))
      assert config_lib.fingerprint(got) == config_lib.fingerprint(want), preset
      assert got.loop.to_dict() == want.loop.to_dict(), preset
  assert train.align_steps(get_config("cpu"), 1437) == 1437 // 32
