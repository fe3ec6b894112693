"""End to end: the smoke run (OCM beats DDPM's fixed beta on the NELBO) and the CIFAR-10 path
(`full` preset code path on tfds mock data at a tiny size)."""

import json

import jax
import numpy as np
import tensorflow_datasets as tfds

from jaxlib_papers.core import distributed
from jaxlib_papers.ocm import train
from jaxlib_papers.ocm.configs.default import get_config


def _blobs(seed: int) -> np.ndarray:
  """A user's data set unlike the built-in ones: three anisotropic 3-D blobs."""
  rng = np.random.default_rng(seed)
  means = rng.uniform(-0.6, 0.6, (3, 3))
  scales = rng.uniform(0.03, 0.15, (3, 3))
  return np.concatenate([rng.normal(m, s, (1200, 3)) for m, s in zip(means, scales)])


def test_smoke_ocm_beats_fixed_beta_on_nelbo(tmp_path):
  """On a user's own samples (shapes from the data: ``train.run(config, dataset=...)``)."""
  config = get_config("smoke")
  config.heads.names = ("ocm",)
  config.eval.methods = ("beta", "ocm")
  config.eval.error_timesteps = ()
  config.eval.num_samples = 256
  config.eval.num_nelbo = 512
  config.loop.num_steps = 400      # optimizer steps (40 calls of 10)
  config.head_loop.num_steps = 200
  # One device: sharding is tested on the kernels; here 8 fake devices would only add cost.
  result = train.run(config, tmp_path, mesh=distributed.make_mesh(devices=jax.devices()[:1]),
                     dataset=_blobs(0))
  assert jax.tree.leaves(result.head_params)[-1].shape[-1] == 3  # the head outputs D = 3
  nelbo = result.nelbo[10]
  assert np.isfinite(nelbo["ocm"]) and np.isfinite(nelbo["beta"])
  assert nelbo["ocm"] < nelbo["beta"] - 0.02, nelbo
  written = json.loads((tmp_path / "results.json").read_text())
  assert written["nelbo"]["10"]["ocm"] == nelbo["ocm"]
  assert "backbone" not in written and "samples" not in written  # in memory only
  assert (tmp_path / "dsm" / "metrics.jsonl").is_file()
  # The loop's rows count optimizer steps: one row per call of 10 steps.
  assert [r["step"] for r in result.dsm_history[:2]] == [10, 20]
  assert result.head_history[-1]["step"] == 200
  # The DSM stage learnt something: the loss fell from its start.
  assert result.dsm_history[-1]["loss"] < result.dsm_history[0]["loss"]
  # Rerun in the same workdir: both stages resume from their last checkpoint.
  again = train.run(config, tmp_path, evaluate_methods=False,
                    mesh=distributed.make_mesh(devices=jax.devices()[:1]), dataset=_blobs(0))
  # Nothing trained again, and the histories are the whole run's (read back from the
  # metrics files), so the results do not depend on the interruption.
  assert again.dsm_history == result.dsm_history
  assert again.head_history == result.head_history
  for a, b in zip(jax.tree.leaves(again.head_params), jax.tree.leaves(result.head_params)):
    np.testing.assert_array_equal(a, b)


def test_cifar10_full_path_on_mock_data():
  config = get_config("full")
  overrides = {
      "model.base_channels": 8, "model.channel_mults": (1,), "model.blocks_per_level": 1,
      "model.head_hidden": 8, "data.train_limit": 16,
      "dsm.batch_size": 8, "dsm.steps_per_call": 1, "heads.batch_size": 8,
      "heads.steps_per_call": 1, "heads.names": ("ocm",),
      "eval.sample_steps": (2,), "eval.quality_steps": (2,), "eval.methods": ("ocm",),
      "eval.num_nelbo": 8, "eval.num_samples": 8, "eval.analytic_samples": 8,
      # No DSM step (its UNet backward only costs compile time; the DSM kernel is tested on
      # the MLP); one OCM head step, whose jvp runs through the UNet.
      "loop.num_steps": 0, "head_loop.num_steps": 1,
      "loop.quiet": True, "head_loop.quiet": True,
  }
  for dotted, value in overrides.items():
    group, name = dotted.split(".")
    config[group][name] = value
  seen = []
  def fid_fn(images):
    seen.append(images.shape)
    return float(np.mean(images))  # a stand-in metric: the hook is what is tested
  with tfds.testing.mock_data(num_examples=16):
    result = train.run(config, None, fid_fn=fid_fn,
                       mesh=distributed.make_mesh(devices=jax.devices()[:1]))
  assert seen == [(8, 32, 32, 3)]
  assert set(result.bpd[2]) == {"ocm"}
  assert np.isfinite(result.nelbo[2]["ocm"])
  assert result.schedule.abar[1] > 0.9999  # the cosine schedule
