"""FSBM training entry point: ``run(config, workdir) -> results``.

The alternation (R-step + M-step) is the train step of ``core.train_loop``:
``loop.num_steps`` alternations, checkpointed and resumable after each one.
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import train_loop
from jaxlib_papers.fsbm import kernel as kernel_lib
from jaxlib_papers.fsbm import opinion, tasks

CROWD_TASKS = ("stunnel", "vneck")


def settings_from_config(config) -> kernel_lib.FSBMSettings:
  c = config.csoc
  for name, value in (("csoc.T_mean", c.T_mean), ("csoc.T_gamma", c.T_gamma)):
    if int(value) < 3:
      raise ValueError(f"config.{name} must be >= 3, got {value}")
  if int(c.num_iters) < 1 or int(config.match.steps) < 1:
    raise ValueError("config.csoc.num_iters and config.match.steps must be >= 1")
  if float(config.sigma) <= 0:
    raise ValueError(f"config.sigma must be > 0, got {config.sigma}")
  csoc = kernel_lib.CondSOCSettings(
      sigma=float(config.sigma), num_mean_knots=int(c.T_mean),
      num_gamma_knots=int(c.T_gamma), num_steps=int(c.S), num_noise=int(c.N),
      lr_mean=float(c.lr_mean), lr_gamma=float(c.lr_gamma),
      num_iters=int(c.num_iters), micro_batch=int(c.mB),
      momentum=float(c.momentum), safe_ratio=float(c.safe_ratio))
  return kernel_lib.FSBMSettings(
      dim=int(config.dim), csoc=csoc, match_steps=int(config.match.steps),
      match_batch=int(config.match.batch_size), lr=float(config.match.lr),
      weight_decay=float(config.match.weight_decay),
      ema_decay=float(config.match.ema_decay),
      num_sim_steps=int(config.num_sim_steps), hidden=int(config.model.hidden))


def reference_drift(config):
  """The task's reference drift for the kernel: None, or the opinion task's
  mean-field polarising drift (``opinion.PolarizeDrift``) built from
  ``config.opinion``."""
  if config.task != "opinion":
    return None
  oc = config.opinion
  if int(oc.field_times) < 2:
    raise ValueError(f"config.opinion.field_times must be >= 2, got {oc.field_times}")
  return opinion.PolarizeDrift.create(
      int(config.dim), num_times=int(oc.field_times), strength=float(oc.strength),
      coeff=float(oc.multiplier_coeff), seed=int(oc.direction_seed))


def load_task_keypoints(config) -> tuple[np.ndarray, np.ndarray, str]:
  """(feedback [K_fb, S, D], held_out [K_ho, S, D], source description)."""
  if config.keypoints_path:
    kp = tasks.load_keypoints(config.keypoints_path)
    source = f"file:{config.keypoints_path}"
  elif config.task in CROWD_TASKS:
    kp = tasks.generate_keypoints(config.task, int(config.num_keypoints),
                                  int(config.csoc.S), seed=int(config.seed))
    source = "generated"
  elif config.task == "opinion":
    kp = opinion.generate_keypoints(int(config.num_keypoints), int(config.csoc.S),
                                    int(config.dim), seed=int(config.seed))
    source = "generated"
  else:
    raise ValueError(
        f"task {config.task!r} has no generated keypoints: set config.keypoints_path "
        "to a [K, S, D] .npy of aligned trajectories")
  if kp.shape[2] != int(config.dim):
    raise ValueError(f"keypoints have dim {kp.shape[2]}, config.dim is {config.dim}")
  if kp.shape[1] != int(config.csoc.S):
    raise ValueError(f"keypoints have {kp.shape[1]} time points, config.csoc.S is "
                     f"{config.csoc.S}; they must match")
  num_fb = int(config.num_feedback)
  if num_fb < 0 or num_fb >= kp.shape[0]:
    return kp, kp[:0], source
  fb, held = tasks.split_keypoints(kp, num_fb, seed=int(config.seed))
  return fb, held, source


def make_data(config):
  """data(step) -> {"x0": [B, D], "x1": [B, D]}, deterministic in step."""
  batch = int(config.batch_size)
  seed = int(config.seed)
  if config.task == "latents":
    lat = tasks.load_latents(config.latents.source_path, config.latents.target_path)

    def data(step):
      rng = np.random.default_rng([seed, step])
      return {"x0": lat.x0[rng.integers(0, len(lat.x0), batch)],
              "x1": lat.x1[rng.integers(0, len(lat.x1), batch)]}
    return data
  p0, p1 = tasks.marginals(config.task, int(config.dim))

  def data(step):
    rng = np.random.default_rng([seed, step])
    return {"x0": p0.sample(rng, batch), "x1": p1.sample(rng, batch)}
  return data


def build(config, tau: float | None = None):
  """(kernel, data, feedback keypoints, held-out keypoints, source)."""
  if config.task not in tasks.TASKS:
    raise ValueError(f"config.task must be one of {tasks.TASKS}, got {config.task!r}")
  fb, held, source = load_task_keypoints(config)
  settings = settings_from_config(config)
  weight = tasks.check_obstacle_weight(config.task, config.gsbm_obstacle_weight)
  # Tasks with obstacles always carry the (unweighted) obstacle cost, weighted per pair by
  # the batch's "state_weight" (config.gsbm_obstacle_weight when absent; 0 = FSBM): FSBM,
  # tau = 0 and the GSBM-style baseline are one compiled program.
  obstacles = config.task in tasks.OBSTACLE_WEIGHT
  kern = kernel_lib.make_kernel(
      settings, fb, tau=float(config.tau if tau is None else tau),
      base_drift=reference_drift(config),
      collision_fn=tasks.collision_fn(config.task),
      state_cost=(lambda x: tasks.obstacle_cost(config.task, x)) if obstacles else None,
      state_weight=weight)
  return kern, make_data(config), fb, held, source


def forward_sampler(kern):
  """``sample(state, x0 [n, D], key) -> [nfe + 1, n, D]``: the forward EMA model's paths,
  jitted (build it once per kernel and pass it to :func:`evaluate` to compile it once)."""
  return jax.jit(lambda s, x, k: kern.simulate(s, x, k, 1.0))


def evaluate(kern, state, config, *, num_samples: int | None = None,
             seed_offset: int = 10_000, sampler=None) -> dict[str, Any]:
  """Samples the forward EMA model and scores it.

  ``sampler``: :func:`forward_sampler` of ``kern`` (default: a new one, compiled here).

  Returns:
    dict with collision_rate (crowd tasks), w2 and mmd of terminal samples vs
    fresh target samples, and ``paths`` [S_saved, n, D] (every 10th EM step).
    Opinion adds directional_similarity and polarisation (index of the
    terminal samples), polarisation_path ([S_saved] index along the paths)
    and polarisation_max, and the same for ``target`` (fresh p1 samples).
  """
  from jaxlib_papers.core import metrics  # pylint: disable=g-import-not-at-top
  n = int(num_samples or config.eval.num_samples)
  data = make_data(config)
  rng_step = seed_offset
  x0, x1 = [], []
  while sum(len(a) for a in x0) < n:
    b = data(rng_step)
    x0.append(b["x0"])
    x1.append(b["x1"])
    rng_step += 1
  x0 = np.concatenate(x0)[:n]
  x1 = np.concatenate(x1)[:n]
  sim = forward_sampler(kern) if sampler is None else sampler
  path = np.asarray(sim(state, jnp.asarray(x0), jax.random.key(int(config.seed) + seed_offset)))
  out: dict[str, Any] = {}
  if config.task in CROWD_TASKS:
    out["collision_rate"] = tasks.collision_rate(config.task, path)
  out["w2"] = float(metrics.w2(path[-1], x1))
  out["mmd"] = float(metrics.mmd_rbf(path[-1], x1))
  saved = path[::10]
  if config.task == "opinion":
    out["directional_similarity"] = tasks.directional_similarity(path[-1])
    out["polarisation"] = opinion.polarisation_index(path[-1])
    out["polarisation_path"] = [opinion.polarisation_index(x) for x in saved]
    out["polarisation_max"] = float(max(out["polarisation_path"]))
    out["target_polarisation"] = opinion.polarisation_index(x1)
  out["paths"] = saved
  return out


def reference_polarisation(config, x0, key) -> list[float]:
  """Polarisation index along the uncontrolled polarising dynamics of the opinion
  task from x0 [n, D] (every 10th of ``config.num_sim_steps`` EM steps, like the
  ``polarisation_path`` of :func:`evaluate`)."""
  path = jax.jit(lambda x, k: opinion.simulate_reference(
      reference_drift(config), x, k, sigma=float(config.sigma),
      num_steps=int(config.num_sim_steps)))(jnp.asarray(x0), key)
  return [opinion.polarisation_index(np.asarray(x)) for x in path[::10]]


def with_tau(data, tau: float, obstacle_weight: float | None = None):
  """``data`` with each batch's per-pair feedback weight "tau" ([B], all ``tau``) and,
  when given, the GSBM obstacle-cost weight "state_weight" ([B], all ``obstacle_weight``)."""
  def data_tau(step):
    batch = data(step)
    batch = {**batch, "tau": np.full(len(batch["x0"]), tau, np.float32)}
    if obstacle_weight is not None:
      batch["state_weight"] = np.full(len(batch["x0"]), obstacle_weight, np.float32)
    return batch
  return data_tau


def _config_with(config, tau: float, obstacle_weight: float):
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.tau = float(tau)
    config.gsbm_obstacle_weight = float(obstacle_weight)
  return config


def run(config, workdir: str | pathlib.Path | None = None, *,
        taus: tuple[float, ...] | None = None,
        obstacle_weights: tuple[float, ...] | None = None, evaluate_model: bool = True,
        verbose: bool = True, errors: str = "raise",
        mesh: jax.sharding.Mesh | None = None) -> list[dict[str, Any]]:
  """Trains FSBM (alternations through core.train_loop) once per run, and evaluates.

  One kernel serves every run: tau and the GSBM obstacle-cost weight are data of the
  batch, so FSBM, its tau = 0 baseline and the GSBM-style baseline (tau = 0, obstacle
  weight > 0) share one compiled alternation.

  Args:
    config: from ``configs.default.get_config`` / ``task_config``.
    workdir: checkpoints/metrics folder (one subfolder ``tau_<tau>`` per run, plus
      ``_obstacle_<weight>`` for a GSBM-style run), or None to train in memory.
    taus: feedback weight of each run (default: ``(config.tau,)``; 0 = unguided).
    obstacle_weights: GSBM obstacle-cost weight of each run, same length as ``taus``
      (default: ``config.gsbm_obstacle_weight`` for every run); > 0 only for tasks with
      obstacles (``tasks.OBSTACLE_WEIGHT`` has GSBM's values).
    evaluate_model: sample and score each forward model at the end.
    verbose: print the loop's progress lines.
    errors: "raise" (default), or "record": a run whose loss diverges
      (``FloatingPointError``) returns ``{"tau", "obstacle_weight", "error"}`` and the
      next run still trains.
    mesh: the alternations' mesh (default: ``core.train_loop``'s, over all devices).

  Returns:
    One dict per run: tau, obstacle_weight, history (per-alternation metrics), state,
    kernel, keypoints_source, feedback/held_out keypoints, and the evaluation metrics.
  """
  taus = (float(config.tau),) if taus is None else tuple(float(t) for t in taus)
  for tau in taus:
    if not (np.isfinite(tau) and tau >= 0):
      raise ValueError(f"taus must be finite and >= 0, got {taus}")
  if obstacle_weights is None:
    obstacle_weights = (float(config.gsbm_obstacle_weight),) * len(taus)
  obstacle_weights = tuple(tasks.check_obstacle_weight(config.task, w)
                           for w in obstacle_weights)
  if len(obstacle_weights) != len(taus):
    raise ValueError(f"obstacle_weights must have one weight per tau ({len(taus)}), got "
                     f"{obstacle_weights}")
  if errors not in ("raise", "record"):
    raise ValueError(f"errors must be 'raise' or 'record', got {errors!r}")
  obstacles = config.task in tasks.OBSTACLE_WEIGHT
  kern, data, fb, held, source = build(config)
  sampler = forward_sampler(kern)  # one compiled sampler for every run's evaluation
  outs = []
  for tau, weight in zip(taus, obstacle_weights):
    cfg = _config_with(config, tau, weight)
    if not verbose:
      with cfg.unlocked():
        cfg.loop.quiet = True
    label = f"tau_{tau:g}" + (f"_obstacle_{weight:g}" if weight else "")
    sub = None
    if workdir is not None:
      sub = pathlib.Path(workdir) / (label if len(taus) > 1 else "")
    name = f"fsbm tau={tau:g}" + (f" obstacle={weight:g}" if weight else "")
    try:
      result = train_loop.run(kern, with_tau(data, tau, weight if obstacles else None), cfg,
                              sub, mesh=mesh, name=name)
    except FloatingPointError as e:
      if errors == "raise":
        raise
      outs.append({"tau": tau, "obstacle_weight": weight, "error": str(e)})
      continue
    out: dict[str, Any] = {"tau": tau, "obstacle_weight": weight, "history": result.history,
                           "state": result.state, "keypoints_source": source,
                           "feedback_keypoints": fb, "held_out_keypoints": held,
                           "kernel": kern}
    if evaluate_model:
      out.update(evaluate(kern, result.state, cfg, sampler=sampler))
    outs.append(out)
  return outs
