"""train_loop: sharded == single device, resume == uninterrupted, NaN guard, config guard."""

import json
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxlib_papers.core import compiler, distributed, train_loop, writers


class State(NamedTuple):
  step: jax.Array        # []
  params: dict           # {"w": [D, 1], "b": [1]}
  opt_state: optax.OptState
  key: jax.Array         # typed PRNG key


class Regression(NamedTuple):
  """A noisy linear-regression kernel: small, but with every field a real kernel has."""
  init: callable
  train_step: callable


def make_kernel(dim=3, lr=0.1, nan_at=None):
  opt = optax.adam(lr)

  def init(key):
    k1, k2 = jax.random.split(key)
    params = {"w": 0.1 * jax.random.normal(k1, (dim, 1)), "b": jnp.zeros((1,))}
    return State(jnp.zeros((), jnp.int32), params, opt.init(params), k2)

  def train_step(state, batch):
    key, noise_key = jax.random.split(state.key)

    def loss_fn(params):
      x = batch["x"] + 0.01 * jax.random.normal(noise_key, batch["x"].shape)
      pred = x @ params["w"] + params["b"]
      loss = jnp.mean((pred[:, 0] - batch["y"]) ** 2)
      if nan_at is not None:  # poison the loss from a given step on
        loss = jnp.where(state.step + 1 >= nan_at, jnp.nan, loss)
      return loss

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = opt.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return State(state.step + 1, params, opt_state, key), {"loss": loss}

  return Regression(init, train_step)


def make_data(batch=16, dim=3, fail_at=None):
  w_true = np.arange(1, dim + 1, dtype=np.float32)

  def data(step):
    if fail_at is not None and step == fail_at:
      raise KeyboardInterrupt(f"simulated kill at step {step}")
    rng = np.random.default_rng(step)
    x = rng.normal(size=(batch, dim)).astype(np.float32)
    return {"x": x, "y": x @ w_true + 0.5}

  return data


def make_config(num_steps=12, checkpoint_every=4, lr=0.1):
  return ml_collections.ConfigDict({
      "seed": 3, "lr": lr,
      "loop": {"num_steps": num_steps, "log_every": 4, "checkpoint_every": checkpoint_every,
               "quiet": True}})


def params_of(result):
  return jax.device_get(result.state.params)


def assert_trees_close(a, b, atol=1e-6):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def test_uses_eight_devices():
  assert jax.device_count() == 8


def test_trains_and_loss_decreases():
  result = train_loop.run(make_kernel(), make_data(), make_config(num_steps=40), None)
  losses = [row["loss"] for row in result.history]
  assert len(losses) == 40
  assert losses[-1] < 0.1 * losses[0]


def test_sharded_equals_single_device():
  kernel, data, config = make_kernel(), make_data(), make_config()
  sharded = train_loop.run(kernel, data, config, None)
  single = train_loop.run(kernel, data, config, None,
                          mesh=distributed.make_mesh(devices=jax.devices()[:1]))
  assert sharded.state.params["w"].sharding.mesh.size == 8
  assert_trees_close(params_of(sharded), params_of(single), atol=1e-5)


def test_jit_equals_eager():
  kernel, data = make_kernel(), make_data()
  state_eager = kernel.init(jax.random.key(3))
  state_jit = jax.jit(kernel.init)(jax.random.key(3))
  step = jax.jit(kernel.train_step)
  for i in range(3):
    with jax.disable_jit():
      state_eager, m_eager = kernel.train_step(state_eager, data(i))
    state_jit, m_jit = step(state_jit, data(i))
    np.testing.assert_allclose(m_eager["loss"], m_jit["loss"], rtol=1e-5)
  assert_trees_close(state_eager.params, state_jit.params, atol=1e-5)


def test_resume_equals_uninterrupted(tmp_path):
  kernel, config = make_kernel(), make_config(num_steps=12, checkpoint_every=4)
  full = train_loop.run(kernel, make_data(), config, tmp_path / "full")
  workdir = tmp_path / "killed"
  with pytest.raises(KeyboardInterrupt):
    train_loop.run(kernel, make_data(fail_at=6), config, workdir)  # dies after ckpt 4
  resumed = train_loop.run(kernel, make_data(), config, workdir)
  assert resumed.resumed_from == 4
  # The history is the whole run's (rows 1-4 from the interrupted run's metrics file).
  assert resumed.history == full.history
  assert_trees_close(params_of(full), params_of(resumed), atol=0)
  # the metrics file reads like one uninterrupted run: steps 1..12 once each
  rows = writers.read_jsonl(workdir / "metrics.jsonl")
  assert [r["step"] for r in rows] == list(range(1, 13))
  full_rows = writers.read_jsonl(tmp_path / "full" / "metrics.jsonl")
  np.testing.assert_allclose([r["loss"] for r in rows], [r["loss"] for r in full_rows])
  assert any((workdir / "tensorboard").iterdir())


def test_resume_can_extend_a_finished_run(tmp_path):
  kernel = make_kernel()
  train_loop.run(kernel, make_data(), make_config(num_steps=8), tmp_path)
  longer = train_loop.run(kernel, make_data(), make_config(num_steps=12), tmp_path)
  assert longer.resumed_from == 8
  full = train_loop.run(kernel, make_data(), make_config(num_steps=12), None)
  assert_trees_close(params_of(full), params_of(longer), atol=0)


def test_workdir_of_another_config_is_refused_and_left_intact(tmp_path):
  kernel = make_kernel()
  train_loop.run(kernel, make_data(), make_config(lr=0.1), tmp_path)
  before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
  metrics_before = (tmp_path / "metrics.jsonl").read_text()
  with pytest.raises(ValueError, match=r"different config.*lr: 0.1 -> 0.5"):
    train_loop.run(make_kernel(lr=0.5), make_data(), make_config(lr=0.5), tmp_path)
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before
  assert (tmp_path / "metrics.jsonl").read_text() == metrics_before


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path):
  kernel = make_kernel(nan_at=7)
  with pytest.raises(FloatingPointError, match=r"at step 7.*last good checkpoint: step 4"):
    train_loop.run(kernel, make_data(), make_config(num_steps=12, checkpoint_every=4),
                   tmp_path)
  from jaxlib_papers.core import checkpoint
  with checkpoint.Checkpointer(tmp_path / "checkpoints") as ckpt:
    assert ckpt.latest_step() == 4
    template = jax.jit(kernel.init)(jax.random.key(0))
    state, record = ckpt.restore(None, template)
  assert record["step"] == 4
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state.params))


def test_batch_not_divisible_by_devices_is_a_clear_error():
  with pytest.raises(ValueError, match="divisible by the device count 8"):
    train_loop.run(make_kernel(), make_data(batch=12), make_config(num_steps=1), None)


@pytest.mark.parametrize("loop, match", [
    ({"num_steps": -1}, "num_steps must be >= 0"),
    ({"num_steps": 4, "log_every": -2}, "must be positive"),
])
def test_bad_loop_settings(loop, match):
  config = ml_collections.ConfigDict({"seed": 0, "loop": loop})
  with pytest.raises(ValueError, match=match):
    train_loop.run(make_kernel(), make_data(), config, None)


def test_write_json_never_leaves_a_half_written_file(tmp_path):
  path = writers.write_json(tmp_path / "out" / "results.json", {"w2": 0.25})
  with pytest.raises(TypeError):
    writers.write_json(path, {"bad": object()})  # fails while serialising
  assert json.loads(path.read_text()) == {"w2": 0.25}


def test_stage_config_keeps_only_the_stage_groups_and_sets_its_loop():
  from jaxlib_papers.core import config as config_lib  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(
      {"seed": 1, "loop": {"num_steps": 5}, "model": {"width": 8}, "head": {"lr": 0.1}})
  dsm = config_lib.stage_config(config, "dsm", groups=("model",), loop={"num_steps": 9})
  assert dsm.to_dict() == {"seed": 1, "loop": {"num_steps": 9}, "model": {"width": 8},
                           "stage": "dsm"}
  whole = config_lib.stage_config(config, "stage1", extra_field=3)
  assert whole.head.lr == 0.1 and whole.loop.num_steps == 5 and whole.extra_field == 3
  # Another stage's settings do not enter this stage's fingerprint.
  changed = ml_collections.ConfigDict(config.to_dict())
  changed.head.lr = 0.5
  assert (config_lib.fingerprint(config_lib.stage_config(changed, "dsm", groups=("model",)))
          == config_lib.fingerprint(config_lib.stage_config(config, "dsm", groups=("model",))))
  with pytest.raises(KeyError, match="no group"):
    config_lib.stage_config(config, "x", groups=("nope",))


def test_an_incomplete_step_folder_is_skipped_and_left_on_disk(tmp_path, capsys):
  kernel = make_kernel()
  config = make_config(num_steps=8, checkpoint_every=4)
  train_loop.run(kernel, make_data(), config, tmp_path)
  empty = tmp_path / "checkpoints" / "16"   # a step folder emptied (or half-copied) by hand
  empty.mkdir()
  longer = train_loop.run(kernel, make_data(), make_config(num_steps=12, checkpoint_every=4),
                          tmp_path)
  assert longer.resumed_from == 8
  assert "skipping" in capsys.readouterr().out and empty.exists()


def test_train_loop_with_compiler_options_trains_the_same():
  kernel, data, config = make_kernel(), make_data(), make_config()
  mesh = distributed.make_mesh(devices=jax.devices()[:1])
  plain = train_loop.run(kernel, data, config, None, mesh=mesh)
  tuned = train_loop.run(kernel, data, config, None, mesh=mesh,
                         compiler_options=compiler.cpu_threaded_dots())
  assert_trees_close(jax.device_get(plain.state.params), jax.device_get(tuned.state.params),
                     atol=1e-5)


def test_runs_of_one_kernel_share_its_programs():
  """A second run of the same kernel traces (so compiles) nothing and trains the same; a
  run on another mesh, or with other compiler options, gets programs of its own."""
  base = make_kernel()
  traces = {"init": 0, "train_step": 0}

  def counted(name):
    def fn(*args):
      traces[name] += 1  # runs only while jax traces
      return getattr(base, name)(*args)
    return fn

  kernel = Regression(counted("init"), counted("train_step"))
  data, config = make_data(), make_config()
  first = train_loop.run(kernel, data, config, None)
  second = train_loop.run(kernel, data, config, None)
  assert traces == {"init": 1, "train_step": 1}
  assert_trees_close(params_of(first), params_of(second), atol=0)
  assert first.history == second.history
  one_device = distributed.make_mesh(devices=jax.devices()[:1])
  train_loop.run(kernel, data, config, None, mesh=one_device)
  assert traces == {"init": 2, "train_step": 2}
  train_loop.run(kernel, data, config, None, mesh=one_device,
                 compiler_options=compiler.cpu_threaded_dots())
  assert traces == {"init": 2, "train_step": 3}

  class Unhashable:  # a callable jax can jit but the loop cannot look up: jitted afresh
    __hash__ = None

    def __call__(self, *args):
      return counted("train_step")(*args)

  again = Regression(kernel.init, Unhashable())
  third = train_loop.run(again, data, config, None)
  train_loop.run(again, data, config, None)
  assert traces == {"init": 2, "train_step": 5}
  assert_trees_close(params_of(first), params_of(third), atol=0)


def _compiled_text(fn, *args, mesh=None):
  """XLA's text of ``fn`` compiled over ``mesh`` (arguments replicated) or alone."""
  if mesh is None:
    return jax.jit(fn).lower(*args).compile().as_text()
  rep = distributed.replicated(mesh)
  return jax.jit(distributed.traced_on(mesh, fn), in_shardings=rep,
                 out_shardings=rep).lower(*args).compile().as_text()


def test_split_reaches_xla_only_under_a_mesh_of_several_devices():
  """``distributed.split``: traced under the 8-device mesh each device computes 2 of the
  16 rows (its [2, 4] part appears in XLA's program) and the result is the same; alone,
  eagerly, under a one-device mesh or inside ``axis_taken`` it is a no-op."""
  mesh = distributed.make_mesh()
  x = jnp.arange(64.0, dtype=jnp.float32).reshape(16, 4)
  f = lambda v: jnp.sin(distributed.split(v)) * 2.0
  assert "f32[2,4]" in _compiled_text(f, x, mesh=mesh)
  assert "f32[2,4]" not in _compiled_text(f, x)
  assert "f32[2,4]" not in _compiled_text(
      f, x, mesh=distributed.make_mesh(devices=jax.devices()[:1]))

  def taken(v):
    with distributed.axis_taken():
      return f(v)
  assert "f32[2,4]" not in _compiled_text(taken, x, mesh=mesh)
  split = jax.jit(distributed.traced_on(mesh, f),
                  in_shardings=distributed.replicated(mesh))(x)
  np.testing.assert_allclose(np.asarray(split), np.sin(np.asarray(x)) * 2, rtol=1e-6)
  assert distributed.split(x) is x                       # eager: unchanged
  columns = lambda v: distributed.split(v, axis=1) + 1.0   # 4 columns over 8: padded
  np.testing.assert_array_equal(
      np.asarray(jax.jit(distributed.traced_on(mesh, columns))(x)), np.asarray(x) + 1)
  with pytest.raises(ValueError, match="axis must be in"):
    jax.jit(distributed.traced_on(mesh, lambda v: distributed.split(v, axis=2)))(x)
