"""FSBM configs: ``get_config(preset)`` for smoke | cpu | full (S-tunnel default).

Other tasks with their official settings: ``get_config("vneck,cpu")`` (launcher:
``--config=jaxlib_papers/fsbm/configs/default.py:vneck,cpu``) or :func:`task_config`.
CondSOC learning rates act per pair as lr / csoc.mB (the official loss is a
mean over a micro-batch of mB pairs); we keep the official lr and mB at every
preset so each pair takes the official step size whatever the number of pairs B.
"""

from __future__ import annotations

from jaxlib_papers.core import config as config_lib

# Official per-task settings (brief table).
TASK_DEFAULTS = {
    "stunnel": {"sigma": 1.0, "tau": 100.0, "csoc.T_mean": 15, "csoc.T_gamma": 30,
                "csoc.lr_mean": 0.2, "csoc.lr_gamma": 0.1, "csoc.mB": 1024},
    "vneck": {"sigma": 1.0, "tau": 10.0, "csoc.T_mean": 15, "csoc.T_gamma": 30,
              "csoc.lr_mean": 0.3, "csoc.lr_gamma": 0.2, "csoc.mB": 256,
              "csoc.safe_ratio": 4.0},
    "opinion": {"sigma": 0.5, "tau": 10.0, "dim": 100, "csoc.T_mean": 30,
                "csoc.T_gamma": 30, "csoc.lr_mean": 0.03, "csoc.lr_gamma": 0.02,
                "csoc.mB": 256, "csoc.num_iters": 700, "match.batch_size": 256,
                "num_sim_steps": 300, "num_keypoints": 300, "num_feedback": 240,
                "model.hidden": 256},
}

# Per-task sizes of the reduced presets (applied after TASK_DEFAULTS). Opinion
# keeps the official lr / mB (so each pair takes the official step); smoke and full
# keep D = 100, cpu runs D = 50 (issue 33, seeds/fsbm.md).
TASK_PRESETS = {
    ("opinion", "smoke"): {"csoc.num_iters": 40, "match.batch_size": 64,
                           "num_sim_steps": 100, "num_keypoints": 40, "num_feedback": 32,
                           "model.hidden": 128, "opinion.field_times": 100},
    # In D = 100 the M-step needs many pairs: with B = 128 the learned flow ends
    # with norms 13-15 instead of p1's 20 (it averages over too few endpoints);
    # B = 512-1024 matches p1. One CondSOC iteration over 256 pairs x 4 paths x
    # 100 times x 100 dims is ~250 ms on 2 cores (10M normals alone ~150 ms), so
    # cpu buys the pairs with a coarser grid (S = 50, N = 2) and fewer iterations.
    # At D = 100 the backward net of this schedule cannot contract p1 to p0 (neither model
    # reached p1: MMD^2 0.44-0.47); at D = 50 (p0 / p1 per-dim variances as the paper's
    # D-dim setting) the unguided model reaches p1 on the check's seeds, in less time.
    ("opinion", "cpu"): {"dim": 50, "batch_size": 512, "csoc.S": 50, "csoc.N": 2,
                         "csoc.num_iters": 100, "match.steps": 3000, "loop.num_steps": 3,
                         "model.hidden": 128},
    ("opinion", "full"): {"batch_size": 10240},
}

BASE = {
    "seed": 0,
    "task": "stunnel",
    "dim": 2,
    "sigma": 1.0,
    "tau": 100.0,
    # Keypoints: "" -> generated (tasks.generate_keypoints); else a .npy/.pt [K, S, D].
    "keypoints_path": "",
    "num_keypoints": 100,      # generated keypoints
    "num_feedback": 80,        # used as feedback; the rest is held out (-1: all)
    # > 0: add GSBM's known obstacle cost (weight x softplus barrier) to every R-step;
    # with tau = 0 that is the GSBM-style baseline (GSBM: 1500 S-tunnel, 3000 V-neck).
    "gsbm_obstacle_weight": 0.0,
    # With the obstacle cost, also GSBM's congestion cost 2 / (1 + |X_t - Y_t|^2) between
    # randomly paired paths (S-tunnel only; 50 per 1500 of obstacle weight, as GSBM).
    "gsbm_congestion": True,
    # With the obstacle cost, also GSBM's entropy cost, the log-density of each path sample
    # under the micro-batch's Gaussian path marginals (V-neck only; 8 per 3000 of obstacle
    # weight, as GSBM). Off below `full`: it costs B N x mB x S Gaussian terms a CondSOC
    # iteration (seeds/fsbm.md).
    "gsbm_entropy": False,
    "batch_size": 256,         # B endpoint pairs per alternation
    "csoc": {
        "T_mean": 15, "T_gamma": 30, "S": 100, "N": 4,
        "lr_mean": 0.2, "lr_gamma": 0.1, "num_iters": 300, "mB": 1024,
        "momentum": 0.0,
        # Safeguard (ours, kernel.CondSOCSettings): reject a pair's step when its loss
        # exceeds safe_ratio x its lowest loss or is not finite; 0 = plain SGD (default).
        # V-neck uses 4: no official V-neck round-0 step is rejected, and generated V-neck
        # keypoints diverge without it. At ratio 2 the S-tunnel smoke test failed.
        "safe_ratio": 0.0,
        # Speed (ours, kernel.CondSOCSettings): > 0 computes each CondSOC gradient over
        # chunks of this many pairs, one after another, so that on a CPU a chunk's arrays
        # stay in cache; 0 = all pairs at once. Each pair's problem is unchanged.
        "pair_chunk": 0,
    },
    "match": {"steps": 1500, "batch_size": 64, "lr": 1e-3, "weight_decay": 0.0,
              "ema_decay": 0.999},
    "model": {"hidden": 128},
    "num_sim_steps": 1000,     # Euler-Maruyama steps (nfe)
    "latents": {"source_path": "", "target_path": ""},
    # Opinion task's polarising reference drift (official DeepGSB/FSBM values).
    "opinion": {"strength": 6.0, "multiplier_coeff": 8.0, "field_times": 500,
                "direction_seed": 4078213},
    "eval": {"num_samples": 1000},
    "loop": {"num_steps": 5, "log_every": 1, "checkpoint_every": 1},
}

OVERRIDES = {
    "smoke": {
        "batch_size": 64, "csoc.S": 30, "csoc.num_iters": 40,
        "match.steps": 200, "num_sim_steps": 100, "loop.num_steps": 2,
        "eval.num_samples": 256, "num_keypoints": 40, "num_feedback": 32,
    },
    # Reduced schedule: official lr/mB and S-tunnel CondSOC iterations, fewer pairs,
    # M-steps and alternations. 500 CondSOC iterations left the per-pair fit
    # unconverged (S-tunnel collision 0.18); 1000 x 5 alternations gives 0.087.
    "cpu": {"csoc.num_iters": 1000, "match.steps": 3000, "loop.num_steps": 5},
    "full": {
        "batch_size": 2560, "csoc.num_iters": 1000, "match.steps": 4000,
        "loop.num_steps": 20, "eval.num_samples": 2560, "gsbm_entropy": True,
    },
}


C = config_lib
# What every key allows, checked when a config is built and again by ``train.run`` and the
# launcher (after command-line overrides), before anything compiles.
CONSTRAINTS = {
    "seed": C.at_least(0),
    "task": C.one_of("stunnel", "vneck", "opinion", "latents"), "dim": C.at_least(1),
    "sigma": C.positive(), "tau": C.non_negative(), "keypoints_path": C.existing_file(),
    "num_keypoints": C.at_least(2), "num_feedback": C.at_least(-1),
    "gsbm_obstacle_weight": C.non_negative(), "gsbm_congestion": C.one_of(True, False),
    "gsbm_entropy": C.one_of(True, False),
    "batch_size": C.at_least(1),
    **{f"csoc.{k}": C.at_least(2) for k in ("T_mean", "T_gamma", "S")},
    "csoc.N": C.at_least(1), "csoc.lr_mean": C.positive(), "csoc.lr_gamma": C.positive(),
    "csoc.num_iters": C.at_least(0), "csoc.mB": C.at_least(1),
    "csoc.momentum": C.in_range(0.0, 1.0, high_open=True), "csoc.safe_ratio": C.non_negative(),
    "csoc.pair_chunk": C.at_least(0),
    "match.steps": C.at_least(1), "match.batch_size": C.at_least(1), "match.lr": C.positive(),
    "match.weight_decay": C.non_negative(),
    "match.ema_decay": C.in_range(0.0, 1.0, high_open=True),
    "model.hidden": C.at_least(1), "num_sim_steps": C.at_least(2),
    "latents.source_path": C.existing_file(), "latents.target_path": C.existing_file(),
    "eval.num_samples": C.at_least(2),
    "loop.num_steps": C.at_least(1), "loop.log_every": C.at_least(1),
    "loop.checkpoint_every": C.at_least(1),
}


def get_config(preset: str = "smoke"):
  """Config of ``preset`` (S-tunnel), or ``"<task>,<preset>"`` for another task
  with its official settings (``--config=.../default.py:opinion,cpu``)."""
  if "," in preset:
    task, preset = (part.strip() for part in preset.split(",", 1))
    return task_config(task, preset)
  return config_lib.make_config(preset, BASE, OVERRIDES, constraints=CONSTRAINTS)


def task_config(task: str, preset: str = "smoke", **overrides):
  """Config of ``task`` with the official per-task settings, then ``overrides``.

  Args:
    task: "stunnel" | "vneck" | "opinion" | "latents".
    overrides: dotted keys ("csoc.num_iters") -> values.
  """
  config = get_config(preset)
  if task not in TASK_DEFAULTS and task != "latents":
    raise ValueError(f"task must be one of {sorted(TASK_DEFAULTS) + ['latents']}, got {task!r}")
  with config.unlocked():
    config.task = task
    config_lib.apply_overrides(config, {**TASK_DEFAULTS.get(task, {}),
                                        **TASK_PRESETS.get((task, preset), {}), **overrides})
  return C.validate(config, CONSTRAINTS)
