"""core.blocks, core.stages, core.results: each block alone and composed.

jit == eager, k scanned steps == k single steps bit-identically, the vmapped member axis ==
separate runs, the gradient step against finite differences in float64, keep-best and early
stopping on a hand-made sequence, stages resumed == uninterrupted.
"""

import dataclasses
import json
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jaxlib_papers.core import blocks, contract, distributed, results, stages


class State(NamedTuple):
  params: Any        # {"w": [D], "b": []}
  opt_state: Any     # Adam moments
  key: jax.Array     # typed PRNG key of the noise


def loss(params, batch, key):
  noise = 0.1 * jax.random.normal(key, batch["x"].shape)
  pred = (batch["x"] + noise) @ params["w"] + params["b"]
  return jnp.mean((pred - batch["y"]) ** 2), {"pred_mean": jnp.mean(pred)}


TX = optax.adam(0.05)
UPDATE = blocks.gradient_step(loss, TX, has_aux=True)


def init(key):
  k_w, k_noise = jax.random.split(key)
  params = {"w": jax.random.normal(k_w, (3,)), "b": jnp.zeros(())}
  return State(params, TX.init(params), k_noise)


def step(state, batch):
  key, sub = jax.random.split(state.key)
  out = UPDATE(state.params, state.opt_state, batch, sub)
  return State(out.params, out.opt_state, key), {"loss": out.loss, **out.aux}


def batch_of(seed, n=16, k=None):
  rng = np.random.default_rng(seed)
  shape = (n,) if k is None else (n, k)
  x = rng.normal(size=shape + (3,)).astype(np.float32)
  return {"x": x, "y": (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3)}


def _raw(x):
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    return np.asarray(jax.random.key_data(x))
  return np.asarray(x)


def tree_equal(a, b):
  return all(np.array_equal(_raw(x), _raw(y))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_gradient_step_matches_finite_differences_in_float64():
  with jax.enable_x64(True):
    def quadratic(p, a):
      return jnp.sum(a * p["v"] ** 2) + jnp.sin(p["v"][0])
    tx = optax.sgd(1.0)
    params = {"v": jnp.array([0.3, -1.2], jnp.float64)}
    a = jnp.array([2.0, 0.25], jnp.float64)
    out = blocks.gradient_step(quadratic, tx)(params, tx.init(params), a)
    eps = 1e-6
    fd = [(quadratic({"v": params["v"].at[i].add(eps)}, a)
           - quadratic({"v": params["v"].at[i].add(-eps)}, a)) / (2 * eps) for i in range(2)]
    np.testing.assert_allclose(out.grads["v"], fd, rtol=1e-8)
    np.testing.assert_allclose(out.params["v"], params["v"] - np.array(fd), rtol=1e-8)
    assert out.aux is None and float(out.loss) == float(quadratic(params, a))


def test_gradient_step_jit_equals_eager():
  state = init(jax.random.key(0))
  batch = batch_of(0)
  eager = step(state, batch)
  jitted = jax.jit(step)(state, batch)
  np.testing.assert_allclose(eager[0].params["w"], jitted[0].params["w"], rtol=1e-6)
  np.testing.assert_allclose(eager[1]["loss"], jitted[1]["loss"], rtol=1e-6)


@pytest.mark.parametrize("sliced", [False, True])
def test_scan_of_k_steps_equals_k_single_steps_bit_identically(sliced):
  k = 4
  state = init(jax.random.key(1))
  if sliced:  # one batch per step on axis 1 (the sharded batch axis stays first)
    batch = batch_of(1, k=k)
    per_step = [{name: b[:, i] for name, b in batch.items()} for i in range(k)]
  else:
    batch = batch_of(1)
    per_step = [batch] * k
  scanned = jax.jit(blocks.scan_steps(step, k, batch_axis=1 if sliced else None,
                                      metrics="stack"))
  got, stacked = scanned(state, batch)
  one = jax.jit(step)
  losses = []
  for b in per_step:
    state, m = one(state, b)
    losses.append(m["loss"])
  assert tree_equal(got, state)
  np.testing.assert_array_equal(stacked["loss"], np.array(losses))


def test_scan_reductions_and_errors():
  state = init(jax.random.key(2))
  batch = batch_of(2)
  _, stacked = blocks.scan_steps(step, 3, metrics="stack")(state, batch)
  _, mean = blocks.scan_steps(step, 3)(state, batch)
  _, last = blocks.scan_steps(step, 3, metrics="last")(state, batch)
  np.testing.assert_allclose(mean["loss"], np.mean(stacked["loss"]), rtol=1e-6)
  assert float(last["loss"]) == float(stacked["loss"][-1])
  with pytest.raises(ValueError, match="length must be >= 1"):
    blocks.scan_steps(step, 0)
  with pytest.raises(ValueError, match="axis 1 must have 3 entries"):
    blocks.scan_steps(step, 3, batch_axis=1)(state, batch_of(2, k=2))
  with pytest.raises(ValueError, match="metrics must be"):
    blocks.scan_steps(step, 2, metrics="median")(state, batch)


def test_vmapped_members_equal_separate_runs():
  members = 3
  member_init = blocks.vmap_init(init, members)
  train = jax.jit(blocks.vmap_members(blocks.scan_steps(step, 2), reduce=False))
  batch = batch_of(3)
  state = member_init(jax.random.key(3))
  for _ in range(3):
    state, per_member = train(state, batch)
  keys = jax.random.split(jax.random.key(3), members)
  single = jax.jit(blocks.scan_steps(step, 2))
  for r in range(members):
    alone = init(keys[r])
    for _ in range(3):
      alone, metrics = single(alone, batch)
    np.testing.assert_allclose(state.params["w"][r], alone.params["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(per_member["loss"][r], metrics["loss"], rtol=1e-5)


def test_one_member_runs_its_own_step_with_the_member_axis_kept():
  """A size-1 member axis runs ``step`` unvmapped: the same state and metrics as the
  vmap of one (shared and sliced batches), every leaf keeping its leading [1]."""
  state = blocks.vmap_init(init, 1)(jax.random.key(4))
  batch = batch_of(2)
  vmapped = jax.vmap(step, in_axes=(0, None))
  for batch_axis, b in ((None, batch), (0, jax.tree.map(lambda a: a[None], batch))):
    got, metrics = jax.jit(blocks.vmap_members(step, batch_axis=batch_axis,
                                               reduce=False))(state, b)
    want, want_metrics = jax.jit(vmapped)(state, batch)
    assert jax.tree.map(jnp.shape, got) == jax.tree.map(jnp.shape, want)
    for a, c in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params)):
      np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-7)
    assert np.array_equal(_raw(got.key), _raw(want.key))
    np.testing.assert_allclose(metrics["loss"], want_metrics["loss"], rtol=1e-6)
    assert metrics["loss"].shape == (1,)
  _, reduced = jax.jit(blocks.vmap_members(step, rules={"loss": ("mean", "max")}))(
      state, batch)
  assert reduced["loss"].shape == () and float(reduced["loss_max"]) == float(reduced["loss"])


@pytest.mark.parametrize("members", [8, 6])
def test_split_members_run_on_their_own_devices_and_equal_the_vmap(members):
  """``vmap_members(split=True)`` traced under the 8-device mesh: with 8 members each
  device runs one ([1, 3] weights in XLA's program) and every member's state and metrics
  are the vmap's; with 6 (not a multiple of 8) it is the vmap itself. Each member
  trains on its own slice of the batch (``batch_axis=0``)."""
  mesh = distributed.make_mesh()
  rep = distributed.replicated(mesh)
  state = blocks.vmap_init(init, members)(jax.random.key(6))
  batch = jax.tree.map(lambda a: np.stack([a * (1 + 0.1 * i) for i in range(members)]),
                       batch_of(6))
  train = lambda split: blocks.scan_steps(blocks.vmap_members(
      step, batch_axis=0, split=split, reduce=False), 3, metrics="stack")
  compiled = {split: jax.jit(distributed.traced_on(mesh, train(split)), in_shardings=rep,
                             out_shardings=rep).lower(state, batch).compile()
              for split in (True, False)}
  assert ("f32[1,3]" in compiled[True].as_text()) == (members == 8)
  assert "f32[1,3]" not in compiled[False].as_text()
  (got, got_m), (want, want_m) = (compiled[s](state, batch) for s in (True, False))
  for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert np.array_equal(_raw(got.key), _raw(want.key))
  np.testing.assert_allclose(got_m["loss"], want_m["loss"], rtol=1e-6)


def test_members_in_sequence_are_each_members_own_step():
  """``vmap_members(sequential=True)``: member r's state and metrics are ``step`` on its
  own state (shared and sliced batches), the program a loop over the members (the
  batched one has none), and the reduced metrics the batched program's."""
  members = 5
  state = blocks.vmap_init(init, members)(jax.random.key(7))
  shared = batch_of(4)
  sliced = jax.tree.map(lambda a: np.stack([a * (1 + 0.1 * i) for i in range(members)], 1),
                        shared)
  for batch_axis, batch in ((None, shared), (1, sliced)):
    seq = blocks.vmap_members(step, batch_axis=batch_axis, reduce=False, sequential=True)
    got, metrics = jax.jit(seq)(state, batch)
    for r in range(members):
      own_batch = batch if batch_axis is None else jax.tree.map(lambda a, r=r: a[:, r], batch)
      want, want_metrics = step(jax.tree.map(lambda a, r=r: a[r], state), own_batch)
      for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_allclose(a[r], b, rtol=1e-6, atol=1e-7)
      assert np.array_equal(_raw(got.key[r]), _raw(want.key))
      np.testing.assert_allclose(metrics["loss"][r], want_metrics["loss"], rtol=1e-6)
    batched = blocks.vmap_members(step, batch_axis=batch_axis, reduce=False)
    loops = [jax.jit(f).lower(state, batch).as_text().count("stablehlo.while")
             for f in (seq, batched)]
    assert loops[0] == loops[1] + 1, loops   # the members' loop (threefry has its own)
  _, reduced = jax.jit(blocks.vmap_members(step, rules={"loss": ("mean", "max")},
                                           sequential=True))(state, shared)
  _, want = jax.jit(blocks.vmap_members(step, rules={"loss": ("mean", "max")}))(state, shared)
  np.testing.assert_allclose(reduced["loss"], want["loss"], rtol=1e-6)
  np.testing.assert_allclose(reduced["loss_max"], want["loss_max"], rtol=1e-6)


@pytest.mark.parametrize("members", [8, 16, 6])
def test_members_in_sequence_split_over_devices_equal_one_device(members):
  """``sequential=True, split=True`` under the 8-device mesh: each device loops over its own
  members (a shard_map: its [members / 8] slice of the weights in XLA's program) and every
  member's state and metrics are what one device gives; 6 members (not a multiple of 8)
  run the one-device loop."""
  mesh = distributed.make_mesh()
  rep = distributed.replicated(mesh)
  state = blocks.vmap_init(init, members)(jax.random.key(8))
  batch = jax.tree.map(lambda a: np.stack([a * (1 + 0.1 * i) for i in range(members)]),
                       batch_of(6))
  train = blocks.scan_steps(blocks.vmap_members(
      step, batch_axis=0, split=True, sequential=True, reduce=False), 3, metrics="stack")
  split = jax.jit(distributed.traced_on(mesh, train), in_shardings=rep,
                  out_shardings=rep).lower(state, batch).compile()
  (got, got_m), (want, want_m) = split(state, batch), jax.jit(train)(state, batch)
  for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert np.array_equal(_raw(got.key), _raw(want.key))
  np.testing.assert_allclose(got_m["loss"], want_m["loss"], rtol=1e-6)
  local = f"f32[{members // 8},3]" if members % 8 == 0 else None
  assert (local is not None and local in split.as_text()) == (members % 8 == 0)


def test_members_in_sequence_by_default_only_on_cpu_devices_of_one_core(monkeypatch):
  devices = jax.local_device_count()
  monkeypatch.setattr(blocks.affinity, "available", lambda: list(range(devices)))
  assert blocks.members_in_sequence_by_default("cpu")
  assert not blocks.members_in_sequence_by_default("gpu")
  state, batch = blocks.vmap_init(init, 3)(jax.random.key(9)), batch_of(3)
  loops = lambda seq: jax.jit(blocks.vmap_members(step, sequential=seq)).lower(
      state, batch).as_text().count("stablehlo.while")
  if jax.default_backend() == "cpu":   # sequential=None: the default's choice
    assert loops(None) == loops(True) == loops(False) + 1
  monkeypatch.setattr(blocks.affinity, "available", lambda: list(range(devices + 1)))
  assert not blocks.members_in_sequence_by_default("cpu")
  assert loops(None) == loops(False)


def test_partitioned_members_equal_their_own_steps_and_one_vmapped_step():
  """vmap_partition: each member runs its group's step (here Adam at 0.05 or plain SGD),
  exactly as it would alone; with one step for every group it equals vmap_members."""
  sgd = optax.sgd(0.1)

  def sgd_step(state, batch):   # the same state layout; Adam's moments left untouched
    key, sub = jax.random.split(state.key)
    (value, aux), grads = jax.value_and_grad(loss, has_aux=True)(state.params, batch, sub)
    updates, _ = sgd.update(grads, sgd.init(state.params))
    params = optax.apply_updates(state.params, updates)
    return State(params, state.opt_state, key), {"loss": value, **aux}

  groups = [np.array([3, 0]), np.array([1, 4, 2])]
  batch, state = batch_of(4), blocks.vmap_init(init, 5)(jax.random.key(5))
  parted = jax.jit(blocks.vmap_partition([sgd_step, step], groups, reduce=False))
  out, per_member = parted(state, batch)
  for r in range(5):
    alone = jax.tree.map(lambda a, r=r: a[r], state)
    own, metrics = (sgd_step if r in (0, 3) else step)(alone, batch)
    for a, b in zip(jax.tree.leaves(out.params), jax.tree.leaves(own.params)):
      np.testing.assert_allclose(a[r], b, rtol=1e-5, atol=1e-6)
    assert np.array_equal(_raw(out.key[r]), _raw(own.key))
    np.testing.assert_allclose(per_member["loss"][r], metrics["loss"], rtol=1e-5)
  same = blocks.vmap_partition([step, step], groups, rules={"loss": ("mean", "max")})
  ref = blocks.vmap_members(step, rules={"loss": ("mean", "max")})
  (s1, m1), (s2, m2) = jax.jit(same)(state, batch), jax.jit(ref)(state, batch)
  for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s2.params)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(m1["loss_max"], m2["loss_max"], rtol=1e-6)
  sliced = blocks.vmap_partition([step, step], groups, batch_axis=0, reduce=False)
  _, per = jax.jit(sliced)(state, jax.tree.map(lambda a: np.stack([a * (i + 1) for i in
                                                                   range(5)]), batch))
  for r in range(5):
    scaled = jax.tree.map(lambda a, r=r: a * (r + 1), batch)
    _, m = step(jax.tree.map(lambda a, r=r: a[r], state), scaled)
    np.testing.assert_allclose(per["loss"][r], m["loss"], rtol=1e-5)
  with pytest.raises(ValueError, match="partition range"):
    blocks.vmap_partition([step, step], [[0, 1], [1, 2]])
  with pytest.raises(ValueError, match="same length"):
    blocks.vmap_partition([step], [[0], [1]])


def test_member_metric_rules_and_seed_index():
  metrics = {"loss": jnp.array([1.0, 3.0]), "rejected": jnp.array([2.0, 5.0]),
             "acc": jnp.array([0.5, 0.7])}
  out = blocks.reduce_members(metrics, {"loss": ("mean", "max"), "rejected": ("sum",)},
                              per_member=True)
  assert float(out["loss"]) == 2.0 and float(out["loss_max"]) == 3.0
  assert float(out["rejected"]) == 7.0 and float(out["acc"]) == pytest.approx(0.6)
  assert float(out["acc/1"]) == pytest.approx(0.7)
  keys = blocks.member_keys(jax.random.key(0), 4, seed_index=[0, 0, 1, 1])
  data = jax.random.key_data(keys)
  assert np.array_equal(data[0], data[1]) and not np.array_equal(data[1], data[2])
  with pytest.raises(ValueError, match="seed_index"):
    blocks.member_keys(jax.random.key(0), 3, seed_index=[0, 1])


def test_member_mapped_loss_equals_the_vmapped_loss_bitwise():
  """Value and gradients of a linear head's CE: bitwise those of the plain loss under vmap
  (the gradient inside or outside the vmap, nested vmaps, an unbatched argument), and close
  to them for a cotangent other than 1."""
  rng = np.random.default_rng(0)
  h = jnp.asarray(rng.normal(size=(2, 3, 16, 5)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(2, 3, 40, 5)), jnp.float32)
  y = jnp.asarray(rng.integers(0, 40, (2, 3, 16)))

  def plain(h, w, y):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ w.T, y))

  mapped = blocks.member_mapped_loss(plain, argnums=(0, 1))

  def check(transform, *args, bitwise=True):
    want = jax.tree.leaves(jax.jit(transform(plain))(*args))
    got = jax.tree.leaves(jax.jit(transform(mapped))(*args))
    for a, b in zip(want, got, strict=True):
      if bitwise:
        assert np.array_equal(a, b)
      else:
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)

  grad = lambda f: jax.value_and_grad(f, argnums=(0, 1))
  check(grad, h[0, 0], w[0, 0], y[0, 0])                           # no vmap
  check(lambda f: jax.vmap(grad(f)), h[0], w[0], y[0])              # as in a vmapped step
  check(lambda f: jax.vmap(jax.vmap(grad(f))), h, w, y)             # nested
  check(lambda f: grad(lambda *a: jnp.sum(jax.vmap(f)(*a))), h[0], w[0], y[0])
  check(lambda f: jax.vmap(grad(f), in_axes=(0, 0, None)), h[0], w[0], y[0, 0])
  check(lambda f: jax.vmap(grad(f), in_axes=(0, None, 0)), h[0], w[0, 0], y[0])
  check(lambda f: jax.vmap(grad(lambda *a: 3.0 * f(*a))), h[0], w[0], y[0], bitwise=False)


def test_ema_update_is_the_running_average():
  ema = {"w": jnp.zeros(2)}
  for value in (1.0, 2.0):
    ema = blocks.ema_update(ema, {"w": jnp.full(2, value)}, 0.9)
  np.testing.assert_allclose(ema["w"], 0.9 * 0.1 * 1.0 + 0.1 * 2.0, rtol=1e-6)
  with pytest.raises(ValueError, match="decay"):
    blocks.ema_update(ema, ema, 1.0)


def test_keep_best_and_early_stopping_on_a_known_sequence():
  best = blocks.init_best({"p": jnp.zeros(())})
  values = [5.0, 4.0, 4.5, 4.2, 3.0, 3.5, 3.6, 3.7, 1.0]
  trace = []
  for i, v in enumerate(values):
    best = blocks.keep_best(best, {"p": jnp.float32(i)}, jnp.float32(v), patience=3)
    trace.append((float(best.value), int(best.params["p"]), int(best.bad_epochs),
                  bool(best.active)))
  # Improvement at 0, 1, 4; three bad evaluations after 4 stop it before the 1.0 at 8.
  assert trace[1] == (4.0, 1, 0, True) and trace[3] == (4.0, 1, 2, True)
  assert trace[4] == (3.0, 4, 0, True) and trace[7] == (3.0, 4, 3, False)
  assert trace[8] == (3.0, 4, 3, False)
  never = blocks.init_best({"p": jnp.zeros(())})
  for v in (1.0, 2.0, 3.0, 4.0):
    never = blocks.keep_best(never, {"p": jnp.float32(v)}, jnp.float32(v))
  assert bool(never.active) and int(never.bad_epochs) == 3


def two_stage_program(num_steps=(6, 4)):
  def make_first(_):
    return contract.train_kernel(init, blocks.scan_steps(step, 2))

  def make_second(params):
    def init2(key):
      return State(params, TX.init(params), key)
    return contract.train_kernel(init2, step)

  data = lambda call: batch_of(call % 3)
  return (
      stages.Stage("first", make_first, num_steps[0], steps_per_call=2, data=data,
                   carry=lambda s: s.params),
      stages.Stage("second", make_second, num_steps[1], data=data),
  )


def config(checkpoint_every=2):
  return ml_collections.ConfigDict({
      "seed": 0, "model": {"width": 3},
      "loop": {"num_steps": 0, "log_every": 2, "checkpoint_every": checkpoint_every,
               "quiet": True}})


def test_stages_resume_equals_uninterrupted(tmp_path):
  full = stages.run_stages(two_stage_program(), config(), tmp_path / "a")
  # An interrupted run: stage 1 done, stage 2 cut at 2 of 4 steps, then rerun in full.
  stages.run_stages(two_stage_program((6, 2)), config(), tmp_path / "b")
  resumed = stages.run_stages(two_stage_program(), config(), tmp_path / "b")
  assert resumed.resumed_from == {"first": 6, "second": 2}
  assert tree_equal(full.states["second"], resumed.states["second"])
  assert [r["step"] for r in full.histories["first"]] == [2, 4, 6]
  rows = [json.loads(x) for x in (tmp_path / "a" / "first" / "metrics.jsonl").read_text()
          .splitlines()]
  assert [r["step"] for r in rows] == [2, 4, 6]


def test_stage_declarations_are_checked():
  with pytest.raises(ValueError, match="multiple of steps_per_call"):
    stages.check_stages([stages.Stage("a", lambda _: None, 5, steps_per_call=2)])
  with pytest.raises(ValueError, match="unique"):
    stages.check_stages([stages.Stage("a", lambda _: None, 1)] * 2)
  skipped = stages.run_stages([stages.Stage("a", lambda _: 1 / 0, 0)], config(), None,
                              initial="untouched")
  assert skipped.carried == "untouched" and skipped.states == {}


@dataclasses.dataclass(frozen=True)
class Result:
  rows: list
  summary: list
  curve: Any
  state: Any = results.in_memory()


def test_results_written_without_in_memory_fields_and_summaries(tmp_path):
  rows = [{"seed": s, "kappa": k, "r2": r} for s, (k, r) in
          enumerate([(1.0, 0.5), (1.0, 0.7), (2.0, 0.9)])]
  summary = results.summarize(rows, ["r2", "absent"], by=("kappa",),
                              stats=("mean", "std", "min"), count="seeds")
  assert summary[0] == {"kappa": 1.0, "seeds": 2, "r2": pytest.approx(0.6),
                        "r2_std": pytest.approx(0.1), "r2_min": 0.5}
  result = Result(rows, summary, np.arange(3.0), state=jnp.ones(2))
  path = results.write(result, tmp_path)
  saved = json.loads(path.read_text())
  assert sorted(saved) == ["curve", "rows", "summary"] and saved["curve"] == [0.0, 1.0, 2.0]
  assert results.write(result, None) is None
  with pytest.raises(TypeError, match="dataclass"):
    results.write({"rows": rows}, tmp_path)
