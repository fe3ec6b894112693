"""DeepRUOT training pipeline: data -> stages 1-4 (``core.stages``) -> evaluation.

``run(config, workdir)`` is what the launcher and the Colab demo call. The config becomes
settings once (:func:`settings_from_config`); the four stages are declared as
``core.stages.Stage`` rows (:func:`declare_stages`), each run in ``workdir/stageN``
(checkpointed, resumable; ``workdir=None`` runs in memory), and the evaluation returns a
typed :class:`RuotResult` (``results.json`` in the workdir).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlib_papers.core import blocks, contract, results
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import metrics as core_metrics
from jaxlib_papers.core import stages as stages_lib
from jaxlib_papers.ruot import data as data_lib
from jaxlib_papers.ruot import flows
from jaxlib_papers.ruot import kernel as K
from jaxlib_papers.ruot import losses as L
from jaxlib_papers.ruot.configs import default as default_config
from jaxlib_papers.ruot.models import Networks, Params, make_networks


def load_snapshots(config: ml_collections.ConfigDict) -> tuple[data_lib.Snapshots, str]:
  """The full data set of ``config.data`` and a short description of its source."""
  if config.data.source == "simulator":
    snaps = data_lib.simulate_gene_network(num_cells=int(config.data.sim_cells),
                                           noise=float(config.data.sim_noise),
                                           seed=int(config.data.sim_seed))
    return snaps, "generated (our gene-network simulator)"
  if config.data.source == "csv":
    if not config.data.path:
      raise ValueError("config.data.source is 'csv' but config.data.path is empty: set "
                       "--config.data.path=/path/to/file.csv (columns samples,x1..xd)")
    return data_lib.load_csv(config.data.path), f"csv: {config.data.path}"
  raise ValueError(f"config.data.source must be 'simulator' or 'csv'; got "
                   f"{config.data.source!r}")


# ---------------------------------------------------------------------------------------
# Config -> settings (once).


def _ot_kwargs(config) -> dict[str, Any]:
  return dict(method=str(config.ot.method), epsilon=float(config.ot.epsilon),
              threshold=float(config.ot.threshold),
              max_iterations=int(config.ot.max_iterations))


# The flow stages' networks, loss terms and optimizers (paper, Alg. 1): stage 1 fits v and
# g on 0.1 L_OT + L_mass; stage 2 freezes g and fits v on 0.1 L_OT; stage 4 fits all three
# with the energy, PINN and initial-density terms by SGD.
FLOW_STAGES = ("stage1", "stage2", "stage4")


def _check_count(config, key: str, per_key: str) -> None:
  """Raises a ValueError naming ``config.<key>`` unless it is a multiple >= 0 of ``per_key``."""
  group, name = key.split(".")
  count, per = int(config[group][name]), int(config[group][per_key])
  if per < 1:
    raise ValueError(f"config.{group}.{per_key} must be >= 1; got {per}")
  if count < 0:
    raise ValueError(f"config.{key} must be >= 0 (0 skips the stage); got {count}")
  if count % per:
    raise ValueError(f"config.{key} ({count}) must be a multiple of config.{group}."
                     f"{per_key} ({per}): both count optimiser steps")


def flow_stage_settings(config: ml_collections.ConfigDict, name: str
                        ) -> K.FlowStageSettings:
  """The :class:`~jaxlib_papers.ruot.kernel.FlowStageSettings` of flow stage ``name``."""
  if name not in FLOW_STAGES:
    raise ValueError(f"flow stage must be one of {FLOW_STAGES}; got {name!r}")
  c = config[name]
  if name == "stage1":
    trainable, weights = ("v", "g"), K.FlowLossWeights(ot=c.lambda_ot, mass=c.lambda_mass)
  elif name == "stage2":
    trainable, weights = ("v",), K.FlowLossWeights(ot=c.lambda_ot, mass=0.0)
  else:
    trainable = ("v", "g", "s")
    weights = K.FlowLossWeights(ot=c.lambda_ot, mass=c.lambda_mass, energy=c.lambda_energy,
                                pinn=c.lambda_pinn, initial=c.lambda_initial)
  stage4 = name == "stage4"
  return K.FlowStageSettings(
      trainable=trainable, weights=weights, optimizer="sgd" if stage4 else "adam",
      lr=float(c.lr), total_passes=int(c.passes), passes_per_step=int(c.passes_per_step),
      dt=float(c.dt) if stage4 else float(config.ode.dt), sigma=float(config.sigma),
      alpha=float(config.alpha), ot_kwargs=_ot_kwargs(config),
      pinn_relative=bool(c.pinn_relative) if stage4 else False,
      initial_form=str(c.initial_form) if stage4 else "log",
      sequential_updates=bool(config.sequential_updates), track_best=not stage4,
      method=str(config.ode.method), equal_steps=bool(config.ode.equal_steps))


class Stage4Settings(NamedTuple):
  """What surrounds stage 4: its density target, the level calibration, NaN fallback."""
  kde_variance: float
  kde_scale: float
  calibrate_s_level: bool       # flows.calibrate_potential_level before the stage
  keep_previous_on_nan: bool    # a diverged stage 4 hands back the stage-3 model


class EvalSettings(NamedTuple):
  after_stage2: bool   # evaluate the ODE of stages 1-2 too
  sde: bool            # evaluate the inference SDE too
  sde_seed: int
  action: bool         # the path action of the learned dynamics


class RuotSettings(NamedTuple):
  """Everything ``run`` reads from the config, read once."""
  seed: int
  num_seeds: int
  width: int
  depth: int
  dt: float             # Euler step of the pushforward, the SDE and the action
  method: str           # ODE scheme
  sigma: float
  alpha: float
  flows: dict[str, K.FlowStageSettings]   # "stage1", "stage2", "stage4"
  score: K.ScoreStageSettings             # stage 3
  stage4: Stage4Settings
  eval: EvalSettings


def settings_from_config(config: ml_collections.ConfigDict) -> RuotSettings:
  """The :class:`RuotSettings` of ``config``.

  Raises:
    ValueError: naming the key of a stage length below 0 or not a multiple of its steps
      per call, or of ``num_seeds`` below 1.
  """
  num_seeds = int(config.num_seeds)
  if num_seeds < 1:
    raise ValueError(f"config.num_seeds must be >= 1; got {num_seeds}")
  for name in FLOW_STAGES:
    _check_count(config, f"{name}.passes", "passes_per_step")
  _check_count(config, "stage3.steps", "steps_per_call")
  s4 = config.stage4
  return RuotSettings(
      seed=int(config.seed), num_seeds=num_seeds, width=int(config.model.width),
      depth=int(config.model.depth), dt=float(config.ode.dt),
      method=str(config.ode.method), sigma=float(config.sigma), alpha=float(config.alpha),
      flows={name: flow_stage_settings(config, name) for name in FLOW_STAGES},
      score=K.ScoreStageSettings(lr=float(config.stage3.lr),
                                 total_steps=int(config.stage3.steps),
                                 steps_per_call=int(config.stage3.steps_per_call),
                                 sigma=float(config.sigma)),
      stage4=Stage4Settings(float(s4.kde_variance), float(s4.kde_scale),
                            bool(s4.calibrate_s_level), bool(s4.keep_previous_on_nan)),
      eval=EvalSettings(bool(config.eval.after_stage2), bool(config.eval.sde),
                        int(config.eval.sde_seed), bool(config.eval.action)))


# ---------------------------------------------------------------------------------------
# Stages.


class Problem(NamedTuple):
  """The networks and the training snapshots every stage trains on."""
  nets: Networks
  times: list[float]        # [K] training times
  xs: list[jax.Array]       # K arrays [n_k, d]


def flow_stage(name: str, problem: Problem, settings: K.FlowStageSettings,
               initial_target: jax.Array | None = None) -> stages_lib.Stage:
  """Flow stage ``name`` (1, 2 or 4): hands on its best params (or its last, stage 4)."""
  make = functools.partial(K.make_flow_stage, problem.nets, problem.times, problem.xs,
                           settings=settings, initial_target=initial_target)
  return stages_lib.Stage(name, make, settings.total_passes, settings.passes_per_step,
                          carry=_best_params if settings.track_best else _last_params)


def _best_params(state: K.FlowState) -> Params:
  return state.best.params


def _last_params(state: K.FlowState | K.ScoreState) -> Params:
  return state.params


def score_kernel(problem: Problem, settings: RuotSettings,
                 params: Params) -> contract.TrainKernel:
  """Stage 3's kernel from the carried params: their ODE particles, paired by exact OT."""
  push = flows.make_pushforward(problem.nets, problem.times, settings.dt, settings.method)
  ode_xs, _ = push(params, problem.xs[0])
  pairs = flows.exact_pairs(np.asarray(ode_xs))
  return K.make_score_stage(problem.nets, problem.times, pairs, params, settings.score)


def score_stage(problem: Problem, settings: RuotSettings) -> stages_lib.Stage:
  """Stage 3: score matching of s on the OT-paired particles of the carried params."""
  return stages_lib.Stage("stage3", functools.partial(score_kernel, problem, settings),
                          settings.score.total_steps, settings.score.steps_per_call,
                          carry=_last_params)


def declare_stages(problem: Problem, settings: RuotSettings,
                   initial_target: jax.Array) -> tuple[stages_lib.Stage, ...]:
  """Stage 1: v and g on 0.1 L_OT + L_mass. Stage 2: g frozen, v on 0.1 L_OT. Stage 3:
  score matching of s on OT-paired bridges. Stage 4: all jointly + energy, PINN, initial."""
  return (flow_stage("stage1", problem, settings.flows["stage1"]),
          flow_stage("stage2", problem, settings.flows["stage2"]),
          score_stage(problem, settings),
          flow_stage("stage4", problem, settings.flows["stage4"], initial_target))


class Trained(NamedTuple):
  params: Params                        # [S]-stacked params after stage 4 (or 3)
  params_stage2: Params                 # after stages 1-2
  stage4_error: str | None              # why stage 4 diverged, if it did
  histories: dict[str, list[dict[str, float]]]
  seconds: dict[str, float]


def train_stages(problem: Problem, settings: RuotSettings, config: ml_collections.ConfigDict,
                 workdir: pathlib.Path | None, params: Params,
                 mesh: jax.sharding.Mesh | None = None) -> Trained:
  """Runs stages 1-2, 3, then 4 (calibrated first; kept out on NaN if so configured)."""
  s4 = settings.stage4
  initial_target = L.kde_density(problem.xs[0], problem.xs[0], s4.kde_variance, s4.kde_scale)
  stage1, stage2, stage3, stage4 = declare_stages(problem, settings, initial_target)
  run = lambda stages, initial: stages_lib.run_stages(stages, config, workdir,
                                                      initial=initial, mesh=mesh, name="ruot")
  first = run((stage1, stage2), params)
  score = run((stage3,), first.carried)
  params = score.carried
  if stage4.num_steps > 0 and s4.calibrate_s_level:
    params = flows.calibrate_potential_level(problem.nets, params, problem.times[0],
                                             problem.xs[0], initial_target, settings.sigma)
  histories = {**first.histories, **score.histories}
  seconds = {**first.seconds, **score.seconds}
  try:
    last = run((stage4,), params)
  except FloatingPointError as error:
    if not s4.keep_previous_on_nan:
      raise
    # Reported, not hidden: the result's stage4_error says what happened and the evaluation
    # uses the stage-3 model (the ODE of stages 1-2 plus the score of stage 3).
    print(f"[ruot] stage 4 diverged ({error}); evaluating the stage-3 model", flush=True)
    return Trained(params, first.carried, str(error), histories, seconds)
  return Trained(last.carried, first.carried, None, {**histories, **last.histories},
                 {**seconds, **last.seconds})


# ---------------------------------------------------------------------------------------
# Evaluation and the result.


def evaluate(snapshots: data_lib.Snapshots, xs: np.ndarray, log_ws: np.ndarray
             ) -> list[list[dict[str, float]]]:
  """W1, W2 (exact, weighted) and TMV per seed and time.

  Args:
    snapshots: all observed times (including a held-out one).
    xs: [S, K, n, d] model particles at ``snapshots.times``; log_ws: [S, K, n].

  Returns:
    ``rows[s][k] = {"time", "w1", "w2", "mass", "mass_target", "tmv", "tmv_no_growth"}``.
  """
  xs, log_ws = np.asarray(xs, np.float64), np.asarray(log_ws, np.float64)
  rel_mass = snapshots.relative_mass
  rows = []
  for s in range(xs.shape[0]):
    seed_rows = []
    for k, (t, y) in enumerate(zip(snapshots.times, snapshots.xs)):
      w = np.exp(log_ws[s, k])
      seed_rows.append({
          "time": float(t),
          "w1": core_metrics.w1(xs[s, k], y, w),
          "w2": core_metrics.w2(xs[s, k], y, w),
          "mass": float(w.sum()),
          "mass_target": float(rel_mass[k]),
          "tmv": float(abs(w.sum() - rel_mass[k])),
          "tmv_no_growth": float(abs(1.0 - rel_mass[k])),
      })
    rows.append(seed_rows)
  return rows


SUMMARY_METRICS = ("w1", "w2", "mass", "tmv", "tmv_no_growth")


def summarize(rows: list[list[dict[str, float]]] | None) -> list[dict[str, float]] | None:
  """Mean and std over seeds of every metric, per time (None without rows)."""
  if not rows:
    return None
  return results.summarize([row for seed_rows in rows for row in seed_rows],
                           SUMMARY_METRICS, by=("time",))


@dataclasses.dataclass(frozen=True)
class RuotResult:
  """What ``run`` returns; ``results.json`` holds the fields not marked in memory."""
  rows: list[list[dict[str, float]]]           # [S][K] ODE metrics per seed and time
  summary: list[dict[str, float]]              # [K] mean, std over seeds
  rows_sde: list[list[dict[str, float]]] | None
  summary_sde: list[dict[str, float]] | None
  summary_stage2: list[dict[str, float]] | None  # the ODE after stages 1-2
  stage4_error: str | None                     # why stage 4 diverged (None: it did not)
  action: list[float]                          # [S] path action (NaN when not evaluated)
  timings: dict[str, float]                    # seconds per stage and of the evaluation
  train_times: list[float]
  held_out_time: float | None
  source: str                                  # where the data came from
  rows_stage2: Any = results.in_memory()
  params: Any = results.in_memory()            # [S]-stacked params of the final model
  ode: Any = results.in_memory()               # (xs [S, K, n, d], log_ws [S, K, n])
  sde: Any = results.in_memory()               # the same from the SDE, or None
  histories: Any = results.in_memory()         # the loop's rows per stage
  data: Any = results.in_memory()              # all snapshots (held-out time included)
  networks: Any = results.in_memory()          # models.Networks


class Evaluation(NamedTuple):
  rows: list[list[dict[str, float]]]
  rows_sde: list[list[dict[str, float]]] | None
  ode: tuple[np.ndarray, np.ndarray]
  sde: tuple[np.ndarray, np.ndarray] | None
  action: np.ndarray


def ode_particles(snapshots: data_lib.Snapshots, nets: Networks, params: Params,
                  settings: RuotSettings) -> tuple[np.ndarray, np.ndarray]:
  """(xs [S, K, n, d], log_ws [S, K, n]): the ODE from the first snapshot, every time."""
  push_all = flows.make_pushforward(nets, [float(t) for t in snapshots.times], settings.dt,
                                    settings.method)
  return jax.device_get(push_all(params, jnp.asarray(snapshots.xs[0])))


def evaluate_model(snapshots: data_lib.Snapshots, nets: Networks, params: Params,
                   settings: RuotSettings) -> Evaluation:
  """ODE (and SDE) particles at every observed time, their metrics, the path action."""
  all_times = [float(t) for t in snapshots.times]
  x0 = jnp.asarray(snapshots.xs[0])
  ode = ode_particles(snapshots, nets, params, settings)
  rows_sde = sde = None
  if settings.eval.sde:
    keys = jax.random.split(jax.random.key(settings.eval.sde_seed), settings.num_seeds)
    sde = jax.device_get(
        flows.make_sde_sampler(nets, all_times, settings.dt, settings.sigma)(params, x0, keys))
    rows_sde = evaluate(snapshots, *sde)
  action = (flows.path_action(nets, params, x0, all_times, settings.dt, settings.sigma,
                              settings.alpha)
            if settings.eval.action else np.full((settings.num_seeds,), np.nan))
  return Evaluation(evaluate(snapshots, *ode), rows_sde, tuple(ode), sde, action)


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None,
        *, snapshots: data_lib.Snapshots | None = None,
        mesh: jax.sharding.Mesh | None = None) -> RuotResult:
  """Trains DeepRUOT (stages 1-4) on ``config``'s data and evaluates every time point.

  Args:
    config: from ``configs/default.py``.
    workdir: folder for per-stage checkpoints, metrics and ``results.json`` (None: memory).
    snapshots: data to use instead of ``config.data`` (e.g. from a reproduction context).
    mesh: the stages' mesh (default: ``core.train_loop``'s, over all devices).

  Returns:
    A :class:`RuotResult`.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  settings = settings_from_config(config)
  source = "given"
  if snapshots is None:
    snapshots, source = load_snapshots(config)
  snapshots = data_lib.validate(snapshots)
  hold = int(config.data.hold_out)
  train_snaps = data_lib.hold_out(snapshots, hold)
  workdir = pathlib.Path(workdir) if workdir is not None else None
  nets = make_networks(snapshots.dim, settings.width, settings.depth)
  params = jax.jit(blocks.vmap_init(nets.init, settings.num_seeds))(
      jax.random.key(settings.seed))
  problem = Problem(nets, [float(t) for t in train_snaps.times],
                    [jnp.asarray(x) for x in train_snaps.xs])
  trained = train_stages(problem, settings, config, workdir, params, mesh)
  rows_stage2 = None
  if settings.eval.after_stage2:
    rows_stage2 = evaluate(snapshots,
                           *ode_particles(snapshots, nets, trained.params_stage2, settings))
  start = time.perf_counter()
  ev = evaluate_model(snapshots, nets, trained.params, settings)
  timings = {**trained.seconds, "eval": time.perf_counter() - start}
  result = RuotResult(
      rows=ev.rows, summary=summarize(ev.rows), rows_sde=ev.rows_sde,
      summary_sde=summarize(ev.rows_sde), summary_stage2=summarize(rows_stage2),
      stage4_error=trained.stage4_error, action=ev.action.tolist(), timings=timings,
      train_times=problem.times, held_out_time=float(snapshots.times[hold]) if hold >= 0
      else None, source=source, rows_stage2=rows_stage2, params=trained.params, ode=ev.ode,
      sde=ev.sde, histories=trained.histories, data=snapshots, networks=nets)
  results.write(result, workdir)
  return result
