"""End to end: the smoke run (OCM beats DDPM's fixed beta on the NELBO) and the CIFAR-10 path
(`full` preset code path on tfds mock data at a tiny size)."""

import jax
import numpy as np
import tensorflow_datasets as tfds

from jaxlib_papers.core import distributed
from jaxlib_papers.ocm import train
from jaxlib_papers.ocm.configs.default import get_config


def test_smoke_ocm_beats_fixed_beta_on_nelbo(tmp_path):
  config = get_config("smoke")
  config.heads.names = ("ocm",)
  config.eval.methods = ("beta", "ocm")
  config.eval.error_timesteps = ()
  config.eval.num_samples = 256
  config.eval.num_nelbo = 512
  config.loop.num_steps = 40
  config.head_loop.num_steps = 20
  # One device: sharding is tested on the kernels; here 8 fake devices would only add cost.
  results = train.run(config, tmp_path, mesh=distributed.make_mesh(devices=jax.devices()[:1]))
  nelbo = results["nelbo"][10]
  assert np.isfinite(nelbo["ocm"]) and np.isfinite(nelbo["beta"])
  assert nelbo["ocm"] < nelbo["beta"] - 0.02, nelbo
  assert (tmp_path / "results.json").is_file()
  assert (tmp_path / "dsm" / "metrics.jsonl").is_file()
  # The DSM stage learnt something: the loss fell from its start.
  assert results["dsm_history"][-1]["loss"] < results["dsm_history"][0]["loss"]


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
    results = train.run(config, None, fid_fn=fid_fn,
                        mesh=distributed.make_mesh(devices=jax.devices()[:1]))
  assert seen == [(8, 32, 32, 3)]
  assert set(results["bpd"][2]) == {"ocm"}
  assert np.isfinite(results["nelbo"][2]["ocm"])
  assert results["schedule"].abar[1] > 0.9999  # the cosine schedule
