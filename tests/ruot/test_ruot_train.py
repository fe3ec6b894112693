"""DeepRUOT end to end at smoke size (our simulator, t = 2 held out, 2 seeds vmapped)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core import distributed
from jaxlib_papers.core.reproduce import Context
from jaxlib_papers.ruot import kernel as K
from jaxlib_papers.ruot import losses as L
from jaxlib_papers.ruot import reproduce, train
from jaxlib_papers.ruot.configs.default import get_config
from jaxlib_papers.ruot.models import make_networks


@pytest.fixture(scope="module")
def smoke_results():
  config = get_config("smoke")
  config.num_seeds = 2
  config.data.hold_out = 2
  config.stage3.steps, config.stage3.steps_per_call = 20, 20  # exercised, kept short
  # One device: the stages are batch-free (seeds vmapped in the state), so 8 fake devices
  # would only run the same replicated program 8 times; sharding is tested on the kernels.
  return train.run(config, None, mesh=distributed.make_mesh(devices=jax.devices()[:1]))


def test_smoke_run_beats_no_growth_on_tmv_and_moves_towards_data(smoke_results):
  rows = smoke_results.summary
  assert smoke_results.held_out_time == 2.0
  assert smoke_results.train_times == [0.0, 1.0, 3.0, 4.0]
  for row in rows[1:]:   # the held-out time included
    assert row["tmv"] < 0.5 * row["tmv_no_growth"], row
  snaps = smoke_results.data
  from jaxlib_papers.core import metrics  # pylint: disable=g-import-not-at-top
  for k in (2, 4):       # better than not moving at all
    assert rows[k]["w1"] < 0.7 * metrics.w1(snaps.xs[0], snaps.xs[k]), rows[k]
  per_seed = smoke_results.rows
  assert len(per_seed) == 2 and per_seed[0][4]["w1"] != per_seed[1][4]["w1"]
  assert len(smoke_results.action) == 2   # path action: off at smoke (compile time)
  assert set(smoke_results.timings) >= {"stage1", "stage3", "eval"}
  # The stages ran their optimiser steps: loop.num_steps counts passes / score steps.
  assert smoke_results.histories["stage1"][-1]["step"] == 40
  assert smoke_results.histories["stage3"][-1]["step"] == 20


def test_reproduce_claims_at_smoke(smoke_results, tmp_path, monkeypatch, offline_data):
  monkeypatch.setattr(reproduce.train, "run", lambda config, workdir, **kw: smoke_results)
  claims = reproduce.check(Context("smoke", tmp_path))
  assert len(claims) == 5
  assert all(c.data.startswith("generated") for c in claims), [c.data for c in claims]
  assert claims[1].holds, claims[1]              # TMV at the held-out time
  assert claims[3].holds, claims[3]              # TMV below no-growth at every time
  corr = reproduce.growth_x2_correlation(smoke_results)
  assert claims[4].ours == f"{corr:.2f}" and -1.0 <= corr <= 1.0
  assert (tmp_path / "ruot_table.md").read_text().count("| ") > 10
  assert (tmp_path / "ruot_gene.png").stat().st_size > 1000


def test_inference_sde_moments():
  """v = c, s = 0, g = b: X_T ~ N(x0 + c T, sigma^2 T), ln w_T = ln w_0 + b T."""
  n, sigma, t_end = 4000, 0.3, 2.0
  c = jnp.array([0.5, -1.0])
  ts = jnp.linspace(0.0, t_end, 41)
  x, log_w = L.inference_sde(lambda t, z: jnp.broadcast_to(c, z.shape),
                             lambda t, z: jnp.full(z.shape[:1], 0.25),
                             lambda t, z: jnp.zeros(z.shape[:1]),
                             jnp.zeros((n, 2)), jnp.zeros((n,)), ts, jax.random.key(0),
                             sigma=sigma)
  assert x.shape == (41, n, 2) and log_w.shape == (41, n)
  np.testing.assert_allclose(np.asarray(x[-1].mean(0)), np.asarray(c) * t_end, atol=0.03)
  np.testing.assert_allclose(np.asarray(x[-1].var(0)), sigma**2 * t_end, rtol=0.08)
  np.testing.assert_allclose(np.asarray(log_w[-1]), 0.25 * t_end, rtol=1e-5)


def test_stage4_pass_runs_and_is_finite():
  """Stage 4 with the paper's weights (initial 0.1) and s far above its level.

  The level of s is shifted by +3 (as an uncalibrated score net can be): the paper's
  initial term exp(2 s / sigma^2) = exp(96) then overflows float32 and the old form made
  this pass NaN; the log-space form (default) and the relative PINN residual stay finite.
  """
  nets = make_networks(2, width=4, depth=1)   # small graph: this test is mostly compile
  params = jax.vmap(nets.init)(jax.random.split(jax.random.key(0), 1))
  layers = params["s"]["params"]
  last = max(layers, key=lambda name: int(name.split("_")[-1]))
  layers[last]["bias"] = layers[last]["bias"] + 3.0
  rng = np.random.default_rng(0)
  xs = [rng.uniform(0, 1, size=(10, 2)).astype(np.float32),
        rng.uniform(0, 1, size=(12, 2)).astype(np.float32)]
  target = L.kde_density(jnp.asarray(xs[0]), jnp.asarray(xs[0]), 0.4, 2.0)
  kern = K.make_flow_stage(
      nets, [0.0, 1.0], xs, params, K.FlowStageSettings(
          trainable=("v", "g", "s"),
          weights=K.FlowLossWeights(ot=1.0, mass=1000.0, energy=1.0, pinn=1.0, initial=0.1),
          optimizer="sgd", lr=1e-5, total_passes=1, passes_per_step=1, dt=0.25, sigma=0.25,
          ot_kwargs=dict(method="exact"), pinn_relative=True, track_best=False),
      initial_target=target)
  state, metrics = jax.jit(kern.train_step)(kern.init(jax.random.key(0)), None)
  for name in ("loss", "energy", "pinn", "initial"):
    assert np.isfinite(float(metrics[name])), name
  assert float(metrics["pinn"]) > 0
  assert float(metrics["initial"]) > 1.0   # far from the optimum, yet finite
  for leaf in jax.tree.leaves(state.params):
    assert np.all(np.isfinite(np.asarray(leaf)))
  moved = [not np.allclose(a, b) for a, b in zip(jax.tree.leaves(params["s"]),
                                                 jax.tree.leaves(state.params["s"]))]
  assert any(moved)  # s is trained jointly in stage 4


def test_config_errors():
  with pytest.raises(ValueError, match="unknown preset"):
    get_config("huge")
  config = get_config("smoke")
  config.data.source, config.data.path = "csv", ""
  with pytest.raises(ValueError, match="config.data.path is empty"):
    train.run(config, None)


@pytest.mark.parametrize("key, value, message", [
    # Out-of-range values: the config's constraints; inconsistent lengths: the stage checks.
    ("stage3.steps", -5, r"config\.stage3\.steps = -5: expected an integer >= 0"),
    ("stage3.steps", 150, r"config\.stage3\.steps \(150\) must be a multiple of "
                          r"config\.stage3\.steps_per_call \(100\)"),
    ("stage1.passes", 30, r"config\.stage1\.passes \(30\) must be a multiple"),
    ("stage4.passes_per_step", 0,
     r"config\.stage4\.passes_per_step = 0: expected an integer >= 1"),
    ("num_seeds", 0, r"config\.num_seeds = 0: expected an integer >= 1"),
])
def test_bad_stage_lengths_name_their_key(key, value, message):
  config = get_config("smoke")
  config.update_from_flattened_dict({key: value})
  with pytest.raises(ValueError, match=message):
    train.run(config, None)   # refused before any data is loaded or anything compiled


def test_settings_from_config_counts_optimiser_steps():
  for preset in ("smoke", "cpu", "full"):
    config = get_config(preset)
    settings = train.settings_from_config(config)
    assert settings.score.total_steps == int(config.stage3.steps)
    assert settings.score.total_steps % settings.score.steps_per_call == 0
    for flow in settings.flows.values():
      assert flow.total_passes % flow.passes_per_step == 0
  # The paper's schedule: 50 + 30 passes, 3001 score steps, 10 SGD passes.
  cpu = train.settings_from_config(get_config("cpu"))
  assert [cpu.flows[s].total_passes for s in ("stage1", "stage2", "stage4")] == [50, 30, 10]
  assert cpu.score.total_steps == 3001
