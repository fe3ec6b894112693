"""FSBM training entry point: ``run(config, workdir) -> Result``.

The config becomes :class:`RunSettings` once (:func:`run_settings`); everything below reads
the settings. The alternation (R-step + M-step) is the train step of a one-stage
``core.stages`` program per (tau, obstacle weight) run: ``loop.num_steps`` alternations,
checkpointed and resumable after each one, in ``workdir/<run label>``.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results, stages
from jaxlib_papers.fsbm import kernel as kernel_lib
from jaxlib_papers.fsbm import opinion, tasks
from jaxlib_papers.fsbm.configs import default as default_config

CROWD_TASKS = ("stunnel", "vneck")


class KeypointSettings(NamedTuple):
  path: str            # "" -> generated; else a .npy/.pt [K, S, D]
  num: int             # generated keypoints
  num_feedback: int    # used as feedback; the rest is held out (-1: all)


class OpinionSettings(NamedTuple):
  """The opinion task's polarising mean-field drift (``opinion.PolarizeDrift``)."""
  field_times: int
  strength: float
  multiplier_coeff: float
  direction_seed: int


class RunSettings(NamedTuple):
  """Everything a run reads from the config."""
  task: str
  seed: int
  dim: int
  sigma: float
  batch_size: int          # B endpoint pairs per alternation
  tau: float               # the default feedback weight
  obstacle_weight: float   # the default GSBM obstacle-cost weight (checked)
  congestion: bool         # GSBM's congestion cost beside the obstacle cost (S-tunnel)
  entropy: bool            # GSBM's entropy cost beside the obstacle cost (V-neck)
  num_sim_steps: int       # Euler-Maruyama steps (nfe)
  eval_samples: int
  fsbm: kernel_lib.FSBMSettings
  keypoints: KeypointSettings
  opinion: OpinionSettings | None   # None: no mean-field drift (every task but opinion)
  latents: tuple[str, str]          # (source .npy, target .npy) of the latents task


def settings_from_config(config) -> kernel_lib.FSBMSettings:
  """The kernel's settings of ``config`` (checked)."""
  c = config.csoc
  for name, value in (("csoc.T_mean", c.T_mean), ("csoc.T_gamma", c.T_gamma)):
    if int(value) < 3:
      raise ValueError(f"config.{name} must be >= 3, got {value}")
  if int(c.num_iters) < 1 or int(config.match.steps) < 1:
    raise ValueError("config.csoc.num_iters and config.match.steps must be >= 1")
  if float(config.sigma) <= 0:
    raise ValueError(f"config.sigma must be > 0, got {config.sigma}")
  chunk, pairs = int(c.pair_chunk), int(config.batch_size)
  if 0 < chunk < pairs and pairs % chunk:
    raise ValueError(f"config.csoc.pair_chunk = {chunk}: expected 0 or a divisor of "
                     f"config.batch_size ({pairs})")
  csoc = kernel_lib.CondSOCSettings(
      sigma=float(config.sigma), num_mean_knots=int(c.T_mean),
      num_gamma_knots=int(c.T_gamma), num_steps=int(c.S), num_noise=int(c.N),
      lr_mean=float(c.lr_mean), lr_gamma=float(c.lr_gamma),
      num_iters=int(c.num_iters), micro_batch=int(c.mB),
      momentum=float(c.momentum), safe_ratio=float(c.safe_ratio),
      pair_chunk=int(c.pair_chunk))
  return kernel_lib.FSBMSettings(
      dim=int(config.dim), csoc=csoc, match_steps=int(config.match.steps),
      match_batch=int(config.match.batch_size), lr=float(config.match.lr),
      weight_decay=float(config.match.weight_decay),
      ema_decay=float(config.match.ema_decay),
      num_sim_steps=int(config.num_sim_steps), hidden=int(config.model.hidden))


def run_settings(config) -> RunSettings:
  """The config as settings: the one walk through it."""
  if config.task not in tasks.TASKS:
    raise ValueError(f"config.task must be one of {tasks.TASKS}, got {config.task!r}")
  oc = config.opinion
  if config.task == "opinion" and int(oc.field_times) < 2:
    raise ValueError(f"config.opinion.field_times must be >= 2, got {oc.field_times}")
  return RunSettings(
      task=str(config.task), seed=int(config.seed), dim=int(config.dim),
      sigma=float(config.sigma), batch_size=int(config.batch_size), tau=float(config.tau),
      obstacle_weight=tasks.check_obstacle_weight(config.task, config.gsbm_obstacle_weight),
      congestion=bool(config.gsbm_congestion), entropy=bool(config.gsbm_entropy),
      num_sim_steps=int(config.num_sim_steps), eval_samples=int(config.eval.num_samples),
      fsbm=settings_from_config(config),
      keypoints=KeypointSettings(str(config.keypoints_path), int(config.num_keypoints),
                                 int(config.num_feedback)),
      opinion=(OpinionSettings(int(oc.field_times), float(oc.strength),
                               float(oc.multiplier_coeff), int(oc.direction_seed))
               if config.task == "opinion" else None),
      latents=(str(config.latents.source_path), str(config.latents.target_path)))


def _as_run(settings) -> RunSettings:
  """``settings`` itself, or the settings of a config (for callers holding a config)."""
  return settings if isinstance(settings, RunSettings) else run_settings(settings)


def reference_drift(settings):
  """The task's reference drift for the kernel: None, or the opinion task's mean-field
  polarising drift (``opinion.PolarizeDrift``). ``settings``: RunSettings or a config."""
  run = _as_run(settings)
  if run.opinion is None:
    return None
  oc = run.opinion
  return opinion.PolarizeDrift.create(
      run.dim, num_times=oc.field_times, strength=oc.strength, coeff=oc.multiplier_coeff,
      seed=oc.direction_seed)


def _task_keypoints(run: RunSettings) -> tuple[np.ndarray, str]:
  """(all keypoints [K, S, D], source description)."""
  num_steps = run.fsbm.csoc.num_steps
  if run.keypoints.path:
    return tasks.load_keypoints(run.keypoints.path), f"file:{run.keypoints.path}"
  if run.task in CROWD_TASKS:
    return tasks.generate_keypoints(run.task, run.keypoints.num, num_steps,
                                    seed=run.seed), "generated"
  if run.task == "opinion":
    return opinion.generate_keypoints(run.keypoints.num, num_steps, run.dim,
                                      seed=run.seed), "generated"
  raise ValueError(
      f"task {run.task!r} has no generated keypoints: set config.keypoints_path "
      "to a [K, S, D] .npy of aligned trajectories")


def load_task_keypoints(settings) -> tuple[np.ndarray, np.ndarray, str]:
  """(feedback [K_fb, S, D], held_out [K_ho, S, D], source description)."""
  run = _as_run(settings)
  kp, source = _task_keypoints(run)
  if kp.shape[2] != run.dim:
    raise ValueError(f"keypoints have dim {kp.shape[2]}, config.dim is {run.dim}")
  if kp.shape[1] != run.fsbm.csoc.num_steps:
    raise ValueError(f"keypoints have {kp.shape[1]} time points, config.csoc.S is "
                     f"{run.fsbm.csoc.num_steps}; they must match")
  num_fb = run.keypoints.num_feedback
  if num_fb < 0 or num_fb >= kp.shape[0]:
    return kp, kp[:0], source
  fb, held = tasks.split_keypoints(kp, num_fb, seed=run.seed)
  return fb, held, source


def make_data(settings):
  """data(step) -> {"x0": [B, D], "x1": [B, D]}, deterministic in step."""
  run = _as_run(settings)
  batch, seed = run.batch_size, run.seed
  if run.task == "latents":
    lat = tasks.load_latents(*run.latents)

    def data(step):
      rng = np.random.default_rng([seed, step])
      return {"x0": lat.x0[rng.integers(0, len(lat.x0), batch)],
              "x1": lat.x1[rng.integers(0, len(lat.x1), batch)]}
    return data
  p0, p1 = tasks.marginals(run.task, run.dim)

  def data(step):
    rng = np.random.default_rng([seed, step])
    return {"x0": p0.sample(rng, batch), "x1": p1.sample(rng, batch)}
  return data


class Built(NamedTuple):
  kernel: Any                    # the TrainKernel
  data: Any                      # data(step) -> batch
  feedback: np.ndarray           # [K_fb, S, D] keypoints used as feedback
  held_out: np.ndarray           # [K_ho, S, D]
  source: str                    # where the keypoints come from
  sampler: Any                   # (state, x0 [n, D], key) -> [nfe + 1, n, D], jitted


def build(settings) -> Built:
  """The kernel, its data and keypoints. ``settings``: RunSettings or a config."""
  run = _as_run(settings)
  fb, held, source = load_task_keypoints(run)
  # Tasks with obstacles always carry the (unweighted) obstacle cost, weighted per pair by
  # the batch's "state_weight" (the config's gsbm_obstacle_weight when absent; 0 = FSBM):
  # FSBM, tau = 0 and the GSBM-style baseline are one compiled program.
  obstacles = run.task in tasks.OBSTACLE_WEIGHT
  task = kernel_lib.TaskTerms(
      base_drift=reference_drift(run), collision_fn=tasks.collision_fn(run.task),
      state_cost=(lambda x: tasks.obstacle_cost(run.task, x)) if obstacles else None,
      interaction_cost=tasks.interaction_cost(run.task, run.congestion),
      entropy_scale=tasks.entropy_scale(run.task, run.entropy),
      tau=run.tau, state_weight=run.obstacle_weight)
  data = make_data(run)
  kern = kernel_lib.make_kernel(run.fsbm, fb, task)
  sampler = jax.jit(functools.partial(kern.simulate, sign=1.0))
  return Built(kern, data, fb, held, source, sampler)


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """Scores of the forward EMA model's samples against fresh target samples."""
  w2: float
  mmd: float
  collision_rate: float | None = None           # crowd tasks
  directional_similarity: float | None = None   # opinion: of the terminal samples
  polarisation: float | None = None             # opinion: index of the terminal samples
  polarisation_path: list[float] | None = None  # opinion: [S_saved] along the paths
  polarisation_max: float | None = None
  target_polarisation: float | None = None      # opinion: of fresh p1 samples
  paths: np.ndarray = results.in_memory()       # [S_saved, n, D] every 10th EM step


def _eval_pairs(run: RunSettings, n: int, seed_offset: int):
  data = make_data(run)
  rng_step = seed_offset
  x0, x1 = [], []
  while sum(len(a) for a in x0) < n:
    b = data(rng_step)
    x0.append(b["x0"])
    x1.append(b["x1"])
    rng_step += 1
  return np.concatenate(x0)[:n], np.concatenate(x1)[:n]


def evaluate(sampler, state, settings, *, num_samples: int | None = None,
             seed_offset: int = 10_000) -> Evaluation:
  """Samples the forward EMA model and scores it (:class:`Evaluation`).

  ``sampler``: the forward EMA model's jitted sampler (``Built.sampler``); ``settings``:
  RunSettings or a config.
  """
  from jaxlib_papers.core import metrics  # pylint: disable=g-import-not-at-top
  run = _as_run(settings)
  x0, x1 = _eval_pairs(run, int(num_samples or run.eval_samples), seed_offset)
  path = np.asarray(sampler(state, jnp.asarray(x0), jax.random.key(run.seed + seed_offset)))
  out: dict[str, Any] = {}
  if run.task in CROWD_TASKS:
    out["collision_rate"] = tasks.collision_rate(run.task, path)
  out["w2"] = float(metrics.w2(path[-1], x1))
  out["mmd"] = float(metrics.mmd_rbf(path[-1], x1))
  saved = path[::10]
  if run.task == "opinion":
    out["directional_similarity"] = tasks.directional_similarity(path[-1])
    out["polarisation"] = opinion.polarisation_index(path[-1])
    out["polarisation_path"] = [opinion.polarisation_index(x) for x in saved]
    out["polarisation_max"] = float(max(out["polarisation_path"]))
    out["target_polarisation"] = opinion.polarisation_index(x1)
  return Evaluation(paths=saved, **out)


def reference_polarisation(settings, x0, key) -> list[float]:
  """Polarisation index along the uncontrolled polarising dynamics of the opinion
  task from x0 [n, D] (every 10th of the ``num_sim_steps`` EM steps, like the
  ``polarisation_path`` of :func:`evaluate`). ``settings``: RunSettings or a config."""
  run = _as_run(settings)
  path = jax.jit(lambda x, k: opinion.simulate_reference(
      reference_drift(run), x, k, sigma=run.sigma,
      num_steps=run.num_sim_steps))(jnp.asarray(x0), key)
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


@dataclasses.dataclass(frozen=True)
class RunResult:
  """One trained (tau, obstacle weight) run, or the error that stopped it."""
  tau: float
  obstacle_weight: float
  keypoints_source: str
  history: list[dict[str, float]] = dataclasses.field(default_factory=list)
  evaluation: Evaluation | None = None     # None: not evaluated, or diverged
  error: str | None = None                 # the divergence message (errors="record")
  seconds: float | None = None             # wall seconds of the training
  feedback_keypoints: np.ndarray | None = results.in_memory()   # [K_fb, S, D]
  held_out_keypoints: np.ndarray | None = results.in_memory()   # [K_ho, S, D]
  state: Any = results.in_memory()         # the final kernel.FSBMState
  kernel: Any = results.in_memory()        # the TrainKernel (shared by every run)


@dataclasses.dataclass(frozen=True)
class Result:
  """``train.run``'s result: one :class:`RunResult` per (tau, obstacle weight)."""
  task: str
  runs: tuple[RunResult, ...]


class RunOptions(NamedTuple):
  """How :func:`run` trains its runs (beside the config)."""
  evaluate_model: bool = True
  verbose: bool = True
  errors: str = "raise"
  mesh: jax.sharding.Mesh | None = None


def _check_runs(run: RunSettings, taus, obstacle_weights, errors: str):
  """((tau, obstacle weight) of every run), checked."""
  taus = (run.tau,) if taus is None else tuple(float(t) for t in taus)
  for tau in taus:
    if not (np.isfinite(tau) and tau >= 0):
      raise ValueError(f"taus must be finite and >= 0, got {taus}")
  if obstacle_weights is None:
    obstacle_weights = (run.obstacle_weight,) * len(taus)
  obstacle_weights = tuple(tasks.check_obstacle_weight(run.task, w) for w in obstacle_weights)
  if len(obstacle_weights) != len(taus):
    raise ValueError(f"obstacle_weights must have one weight per tau ({len(taus)}), got "
                     f"{obstacle_weights}")
  if errors not in ("raise", "record"):
    raise ValueError(f"errors must be 'raise' or 'record', got {errors!r}")
  return tuple(zip(taus, obstacle_weights))


def _loop_config(config, tau: float, weight: float) -> ml_collections.ConfigDict:
  """The loop's config of one run: its fingerprint names the run's tau and weight."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.tau = float(tau)
    config.gsbm_obstacle_weight = float(weight)
  return config


def _train_one(config, run: RunSettings, built: Built, tau_weight, workdir, options):
  """One (tau, obstacle weight) run as a one-stage program: (stages result, stage dir)."""
  tau, weight = tau_weight
  label = f"tau_{tau:g}" + (f"_obstacle_{weight:g}" if weight else "")
  obstacles = run.task in tasks.OBSTACLE_WEIGHT
  stage = stages.Stage(
      label, lambda _: built.kernel, int(config.loop.num_steps),
      data=with_tau(built.data, tau, weight if obstacles else None),
      loop=None if options.verbose else {"quiet": True})
  out = stages.run_stages((stage,), _loop_config(config, tau, weight), workdir,
                          mesh=options.mesh, name="fsbm")
  return out, label


def _history(out: stages.StagesResult, label: str, workdir) -> list[dict[str, float]]:
  """Every alternation's metrics (those before a resume too, from the run's metrics file)."""
  from jaxlib_papers.core import writers  # pylint: disable=g-import-not-at-top
  if workdir is not None and out.resumed_from[label] is not None:
    path = pathlib.Path(workdir) / label / "metrics.jsonl"
    if path.exists():
      return writers.read_jsonl(path)
  return out.histories[label]


def run(config, workdir: str | pathlib.Path | None = None, *,
        taus: tuple[float, ...] | None = None,
        obstacle_weights: tuple[float, ...] | None = None, **options) -> Result:
  """Trains FSBM (alternations through core.stages) once per run, and evaluates.

  One kernel serves every run: tau and the GSBM obstacle-cost weight are data of the
  batch, so FSBM, its tau = 0 baseline and the GSBM-style baseline (tau = 0, obstacle
  weight > 0) share one compiled alternation. The runs train one after another: vmapped
  over tau (``blocks.vmap_members``) they are not bit-identical (the batched programs
  round differently: S-tunnel smoke, first alternation, CondSOC loss 14147.6367 ->
  14147.6377 and M-step loss 58.710995 -> 58.710999 at tau = 100), and the feedback
  branch becomes a select that computes both branches for every member.

  Args:
    config: from ``configs.default.get_config`` / ``task_config``.
    workdir: the runs' folder (one subfolder ``tau_<tau>[_obstacle_<weight>]`` per run,
      each resumable; ``results.json`` beside them), or None to train in memory.
    taus: feedback weight of each run (default: ``(config.tau,)``; 0 = unguided).
    obstacle_weights: GSBM obstacle-cost weight of each run, same length as ``taus``
      (default: ``config.gsbm_obstacle_weight`` for every run); > 0 only for tasks with
      obstacles (``tasks.OBSTACLE_WEIGHT`` has GSBM's values).
    **options: :class:`RunOptions`: ``evaluate_model`` (sample and score each forward
      model), ``verbose`` (the loop's progress lines), ``errors`` ("raise", or "record": a
      diverged run (``FloatingPointError``) is a :class:`RunResult` with ``error`` and the
      next run still trains), ``mesh`` (default: the loop's, over all devices).

  Returns:
    A :class:`Result`, also written to ``workdir/results.json``.
  """
  opts = RunOptions(**options)
  config_lib.validate(config, default_config.CONSTRAINTS)
  run_set = run_settings(config)
  pairs = _check_runs(run_set, taus, obstacle_weights, opts.errors)
  built = build(run_set)
  common = dict(keypoints_source=built.source, feedback_keypoints=built.feedback,
                held_out_keypoints=built.held_out, kernel=built.kernel)
  runs = []
  for tau, weight in pairs:
    sub = None if workdir is None else pathlib.Path(workdir)
    try:
      out, label = _train_one(config, run_set, built, (tau, weight), sub, opts)
    except FloatingPointError as e:
      if opts.errors == "raise":
        raise
      runs.append(RunResult(tau, weight, built.source, error=str(e)))
      continue
    state = out.states[label]
    evaluation = (evaluate(built.sampler, state, run_set)
                  if opts.evaluate_model else None)
    runs.append(RunResult(tau, weight, history=_history(out, label, workdir),
                          evaluation=evaluation, seconds=out.seconds[label], state=state,
                          **common))
  result = Result(run_set.task, tuple(runs))
  results.write(result, workdir)
  return result
