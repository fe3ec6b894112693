"""OCM on scikit-learn's 8x8 digits: the image path (UNet backbone, convolutional heads, the
OCM probe target through the UNet, the discretised decoder and bits/dim) at CPU size.

``get_config(preset)``: the ``default.py`` preset plus the digits overrides below.

  python -m launch.ocm --config=jaxlib_papers/ocm/configs/digits.py:cpu --workdir=runs/ocm_digits
"""

from __future__ import annotations

from jaxlib_papers.ocm.configs import default

_DIGITS = {
    "data.name": "digits",
    "model.kind": "unet", "model.base_channels": 16, "model.channel_mults": (1, 2),
    "model.blocks_per_level": 1, "model.head_hidden": 16,
    "dsm.batch_size": 64, "dsm.lr": 2e-3, "dsm.warmup_steps": 100, "dsm.ema_decay": 0.995,
    "heads.batch_size": 64, "heads.lr": 1e-3, "heads.warmup_steps": 50,
    "eval.sample_steps": (5, 10, 20), "eval.quality_steps": (),
    "eval.methods": ("beta_tilde", "beta", "analytic", "sn", "npr", "ocm"),
    "eval.num_nelbo": 297, "eval.num_samples": 64, "eval.analytic_samples": 297,
    "eval.error_timesteps": (), "eval.clip_x0": 1.0,
    "loop.num_steps": 1000, "head_loop.num_steps": 500,  # 10 optimizer steps per call
}

_SMOKE = {
    "model.base_channels": 8, "model.head_hidden": 8, "dsm.batch_size": 16,
    "heads.batch_size": 16, "dsm.steps_per_call": 2, "heads.steps_per_call": 2,
    "eval.sample_steps": (5,), "eval.num_nelbo": 32, "eval.analytic_samples": 32,
    "eval.num_samples": 8,
    "loop.num_steps": 4, "head_loop.num_steps": 4,  # 2 calls of 2 steps each
}


def get_config(preset: str = "cpu"):
  """The digits config of ``preset`` (smoke | cpu | full; full = cpu here)."""
  config = default.get_config("cpu" if preset == "full" else preset)
  items = dict(_DIGITS)
  if preset == "smoke":
    items.update(_SMOKE)
  for dotted, value in items.items():
    group, name = dotted.split(".")
    config[group][name] = value
  # The UNet's steps keep XLA's defaults: with threaded dots its DSM step ran 2.41 against
  # 2.66 steps/s on 2 cores (heads 12.3 against 11.4), the same losses (seeds/ocm.md).
  config.compiler_options = "default"
  return config
