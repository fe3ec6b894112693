"""CCA configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

Two ``core.stages`` (``workdir/pretrain``, ``workdir/align``): class-conditional
pretraining with condition dropout (``num_seeds`` runs vmapped), then alignment fine-tuning
from each pretrained model, one run per (seed, lambda) in one program; then sampling and
evaluation of base / CFG / CCA models.

* smoke: seconds (tests, CI, the Colab demo); claims need not hold.
* cpu: the reproduction size (digits, 3 seeds, one CCA epoch).
* full: a larger transformer on lossless (17-level) digits, longer runs, for a GPU.
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_BASE = dict(
    seed=0,
    num_seeds=3,                  # runs vmapped in one program (error bars)
    # tokenizer "raster": 64 tokens of `levels` values (V = levels); "vq": a k-means
    # codebook of `codebook_size` (= V) patch x patch patches, (8 / patch)^2 tokens.
    data=dict(levels=5, test_size=360, split_seed=0, tokenizer="raster",
              codebook_size=512, patch=2, codebook_seed=0),
    model=dict(width=48, depth=2, heads=4, mlp=128),
    pretrain=dict(batch_size=32, lr=2e-3, warmup_steps=30, weight_decay=0.05,
                  label_dropout=0.1, grad_clip=1.0),
    align=dict(
        loss="cca",               # "cca" | "dpo" | "unlearn"
        beta=0.1,                 # beta (rescaled for 64 tokens; the paper: 0.02 at 256+)
        lambdas=(0.0, 3.0, 30.0, 300.0),  # lambda sweep, one run each per seed
        main_lambda=30.0,         # the lambda of the headline CCA row
        uncond_ratio=0.1,         # share of rows whose labels become null
        negatives="roll",         # "roll" (official) | "shuffle"
        batch_size=32, lr=3e-4, weight_decay=0.05, grad_clip=1.0,
        epochs=1,
    ),
    eval=dict(
        samples_per_class=50,
        cfg_scales=(0.5, 1.0, 2.0, 3.0),   # s: logits l_c + s (l_c - l_u)
        cca_cfg_scale=1.0,        # CFG on top of the main CCA model
        use_cache=True,
        seed=1,
    ),
    # Optimiser steps of pretraining (one per compiled call); alignment's count is
    # align.epochs of the training split.
    loop=dict(num_steps=300, log_every=100, checkpoint_every=300, quiet=False),
    align_loop=dict(log_every=20, checkpoint_every=1000, quiet=False),
)

_OVERRIDES = {
    "smoke": {
        "num_seeds": 2,
        "model.width": 16, "model.depth": 1, "model.heads": 2, "model.mlp": 32,
        "align.lambdas": (0.0, 30.0), "align.epochs": 0.1,
        "eval.samples_per_class": 8, "eval.cfg_scales": (1.0,),
        "loop.num_steps": 30, "loop.log_every": 10, "loop.checkpoint_every": 30,
    },
    "cpu": {},
    "full": {
        "num_seeds": 5,
        "data.levels": 17,
        "model.width": 128, "model.depth": 4, "model.mlp": 512,
        "pretrain.batch_size": 64, "pretrain.lr": 1e-3, "pretrain.warmup_steps": 200,
        "align.lambdas": (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0),
        "align.batch_size": 32, "align.epochs": 1,
        "eval.samples_per_class": 500, "eval.cfg_scales": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
        "loop.num_steps": 5000, "loop.log_every": 100, "loop.checkpoint_every": 1000,
    },
}


# What every key allows, checked when a config is built and again by ``train.run`` and the
# launcher (after command-line overrides), before anything compiles.
CONSTRAINTS = {
    "seed": C.at_least(0), "num_seeds": C.at_least(1),
    "data.levels": C.at_least(2), "data.test_size": C.at_least(1),
    "data.tokenizer": C.one_of("raster", "vq"), "data.codebook_size": C.at_least(2),
    "data.patch": C.one_of(1, 2, 4, 8), "data.codebook_seed": C.at_least(0),
    **{f"model.{k}": C.at_least(1) for k in ("width", "depth", "heads", "mlp")},
    "pretrain.batch_size": C.at_least(1), "pretrain.lr": C.positive(),
    "pretrain.warmup_steps": C.at_least(0), "pretrain.weight_decay": C.non_negative(),
    "pretrain.label_dropout": C.in_range(0.0, 1.0, high_open=True),
    "pretrain.grad_clip": C.positive(),
    "align.loss": C.one_of("cca", "dpo", "unlearn"), "align.beta": C.positive(),
    "align.lambdas": C.each(C.non_negative()), "align.main_lambda": C.non_negative(),
    "align.uncond_ratio": C.in_range(0.0, 1.0, high_open=True),
    "align.negatives": C.one_of("roll", "shuffle"), "align.batch_size": C.at_least(1),
    "align.lr": C.positive(), "align.weight_decay": C.non_negative(),
    "align.grad_clip": C.positive(), "align.epochs": C.non_negative(),
    "eval.samples_per_class": C.at_least(1), "eval.cfg_scales": C.each(C.non_negative()),
    "loop.num_steps": C.at_least(1), "loop.log_every": C.at_least(1),
    "loop.checkpoint_every": C.at_least(1), "align_loop.log_every": C.at_least(1),
    "align_loop.checkpoint_every": C.at_least(1),
}


def get_config(preset: str = "smoke"):
  """The CCA config of ``preset`` (smoke | cpu | full)."""
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
