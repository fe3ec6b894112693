"""Identifiability configs: ``get_config("[task,]preset")``, presets smoke | cpu | full.

Tasks:

* ``vmf`` (default): the vMF-mixture simulation of Tables 2-3. ``objective.kind`` picks
  supervised (labels ``c``) or DIET (labels ``I``); ``dgp.kappas`` x
  ``objective.normalize_head`` are variants trained in one vmapped program with
  ``num_seeds`` seeds each.
  With ``data.path`` (or ``train.run(config, dataset=...)``) the same encoder and head
  train on the user's own samples instead (``data.Dataset``).
* ``sprites``: the DisLib stand-in (sprites rendered in code, CE on the shape, linear
  decoding of scale and position from the last hidden layer).

``loop.num_steps`` (and ``log_every``, ``checkpoint_every``) count Adam steps, multiples of
the task's ``steps_per_call`` (``optim`` for vmf, ``sprites`` for sprites): each train-loop
call runs that many steps as one ``lax.scan``.
"""

from __future__ import annotations

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core.config import check_preset, make_config

TASKS = ("vmf", "sprites")

_BASE = dict(
    task="vmf",
    seed=0,
    num_seeds=3,
    dgp=dict(
        dim=5,                    # d: latent and observation dimension
        num_classes=100,          # |C|: cluster vectors
        num_indices=1000,         # N: instance indices (DIET labels); class = I mod |C|
        kappas=(10.0,),           # kappa: vMF concentration(s), one variant each
        conditional="vmf",        # "vmf" | "laplace" | "normal" (scale kappa / 10)
        mixing_layers=4,          # layers of g
        mixing_candidates=2048,   # g's matrices: best-conditioned of this many draws
        num_proposals=12,         # Wood proposals per vMF sample
    ),
    model=dict(
        hidden=(32, 128, 128, 32),   # () = the paper's [10d, 50d, 50d, 50d, 50d, 10d]
        batch_norm=True,
        negative_slope=0.01,
    ),
    objective=dict(
        kind="supervised",        # "supervised" (y = c) | "diet" (y = I)
        normalize_head=(False,),  # one variant each: renormalise W's rows every step
        normalize_features=False,  # f(x) on the sphere (temperature when W is too)
    ),
    optim=dict(learning_rate=3e-3, batch_size=1024, steps_per_call=50,   # batch: paper's
               cosine_decay=True),   # cosine decay of the step size over the run
    eval=dict(num_samples=8192, seed=1),
    # Your own data set instead of the vMF mixture (task vmf): an .npz with x [N, p], y [N]
    # int labels and optionally z [N, d] latents; shapes are inferred from it, and the last
    # holdout_fraction of the samples scores the trained encoders.
    data=dict(path="", holdout_fraction=0.2),
    sprites=dict(
        size=32, num_scales=6, num_positions=16, supersample=4,
        hidden=(512, 512, 512),   # the paper's 3 x [Linear 512, BN, ReLU]
        batch_size=256, learning_rate=1e-3, steps_per_call=50,
        val_fraction=0.1, test_fraction=0.1,
    ),
    loop=dict(num_steps=2000, log_every=500, checkpoint_every=2000, quiet=False),
)

_OVERRIDES = {
    "smoke": {
        "num_seeds": 2, "model.hidden": (16, 32, 16),
        "dgp.mixing_candidates": 256, "optim.batch_size": 128, "optim.steps_per_call": 10,
        "eval.num_samples": 2048, "loop.num_steps": 50, "loop.log_every": 50,
        "loop.checkpoint_every": 50,
        "sprites.size": 16, "sprites.num_scales": 3, "sprites.num_positions": 8,
        "sprites.supersample": 2, "sprites.hidden": (64, 64), "sprites.batch_size": 128,
        "sprites.steps_per_call": 10,
    },
    "cpu": {},
    "full": {
        "num_seeds": 5, "model.hidden": (), "dgp.mixing_candidates": 25000,
        "optim.learning_rate": 1e-3, "optim.batch_size": 1024, "optim.cosine_decay": False,
        "optim.steps_per_call": 100, "loop.num_steps": 50000, "loop.log_every": 1000,
        "loop.checkpoint_every": 5000, "sprites.batch_size": 4096,
    },
}

_TASK_OVERRIDES = {
    # cpu: 1000 steps x 256 = 69 epochs of the 3,686 training images (the official
    # dislib/main.py trains at most 100 epochs and stops once shape accuracy > 0.999).
    # full: sprites keeps 50 steps per call (vmf's 100), hence its own cadence.
    "sprites": {"smoke": {"loop.num_steps": 60}, "cpu": {"loop.num_steps": 1000},
                "full": {"loop.num_steps": 20000, "loop.log_every": 500,
                         "loop.checkpoint_every": 2500}},
}


C = config_lib
# What every key allows, checked when a config is built and again by ``train.run`` (after
# command-line overrides), before anything compiles.
CONSTRAINTS = {
    "task": C.one_of(*TASKS), "seed": C.at_least(0), "num_seeds": C.at_least(1),
    "dgp.dim": C.at_least(2), "dgp.num_classes": C.at_least(1),
    "dgp.num_indices": C.at_least(1), "dgp.kappas": C.each(C.positive()),
    "dgp.conditional": C.one_of("vmf", "laplace", "normal"),
    "dgp.mixing_layers": C.at_least(0), "dgp.mixing_candidates": C.at_least(1),
    "dgp.num_proposals": C.at_least(1),
    "model.hidden": C.each(C.at_least(1), non_empty=False),
    "model.negative_slope": C.non_negative(),
    "objective.kind": C.one_of("supervised", "diet"),
    "objective.normalize_head": C.each(C.one_of(False, True)),
    "optim.learning_rate": C.positive(), "optim.batch_size": C.at_least(1),
    "optim.steps_per_call": C.at_least(1),
    "eval.num_samples": C.at_least(2),
    "data.path": C.existing_file(),
    "data.holdout_fraction": C.in_range(0.0, 1.0, low_open=True, high_open=True),
    "sprites.size": C.at_least(8), "sprites.hidden": C.each(C.at_least(1)),
    "sprites.batch_size": C.at_least(1), "sprites.learning_rate": C.positive(),
    "sprites.steps_per_call": C.at_least(1),
    "sprites.val_fraction": C.in_range(0.0, 1.0, low_open=True, high_open=True),
    "sprites.test_fraction": C.in_range(0.0, 1.0, high_open=True),
    "loop.num_steps": C.at_least(1), "loop.log_every": C.at_least(1),
    "loop.checkpoint_every": C.at_least(1),
}


def get_config(spec: str = "smoke"):
  """The config of ``spec``: ``"<preset>"`` or ``"<task>,<preset>"`` (task vmf|sprites)."""
  task, _, preset = spec.rpartition(",")
  task = task or "vmf"
  check_preset(preset)
  if task not in TASKS:
    raise ValueError(f"unknown task {task!r}: expected one of {', '.join(TASKS)}")
  overrides = {p: dict(v) for p, v in _OVERRIDES.items()}
  for p, extra in _TASK_OVERRIDES.get(task, {}).items():
    overrides[p].update(extra)
  config = make_config(preset, _BASE, overrides)
  config.task = task
  return C.validate(config, CONSTRAINTS)
