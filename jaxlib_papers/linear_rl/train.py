"""Runs the experiment of a config: ``run(config, workdir) -> RunResult``.

The config becomes :class:`RunSettings` once (:func:`settings_from_config`). Every agent
of the experiment runs ``run.num_episodes`` episodes on ``run.num_seeds`` seeds (seeds
``seed .. seed + num_seeds - 1``) as one compiled, seed-vmapped ``lax.scan``
(``core.contract.run_episodes``); the typed result per agent (:class:`AgentResult`:
regret curves, cumulative regret, out-of-span counts against ``d H``, the Lemma 2 in-span
prediction gap, LQR gains against Riccati, timings) and the mean / std over seeds
(``core.results.summarize``) go to ``<workdir>/results.json`` when ``workdir`` is given.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results, timing
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.linear_rl import envs, kernel
from jaxlib_papers.linear_rl.configs import default as default_config

EXPERIMENTS = ("deep_sea", "linear_system", "lqr")


def agent_config(name: str, spec, **overrides) -> kernel.AgentConfig:
  """An :class:`kernel.AgentConfig` from a config group ``agent``."""
  fields = {k: spec[k] for k in kernel.AgentConfig._fields if k in spec}
  fields.update(overrides)
  fields["name"] = name
  return kernel.AgentConfig(**fields)


def _seed_keys(seeds: np.ndarray | int) -> jax.Array:
  if isinstance(seeds, int):
    if seeds < 1:
      raise ValueError(f"seeds must be >= 1, got {seeds!r}")
    seeds = np.arange(seeds)
  seeds = jnp.asarray(seeds)
  if seeds.ndim != 1:
    raise ValueError(f"seeds must be 1-D, got shape {seeds.shape}")
  return jax.vmap(jax.random.key)(seeds)


def simulate_timed(env: envs.Env, cfg: kernel.AgentConfig, num_episodes: int,
                   seeds: np.ndarray | int, betas=None
                   ) -> tuple[kernel.RunOutput, float, float]:
  """:func:`simulate`, also returning ``(compile_seconds, run_seconds)``.

  ``betas``: optional sequence of LSVI-UCB bonus scales run as one program (vmapped
  over them, every scale on the same seeds); the output then has a leading ``[len(betas)]``
  axis before the seed axis and ``cfg.beta`` is ignored.
  """
  if not isinstance(num_episodes, int) or num_episodes < 1:
    raise ValueError(f"num_episodes must be an int >= 1, got {num_episodes!r}")
  kernel.validate_agent_config(cfg)
  if betas is not None:
    betas = np.asarray(betas, np.float64)
    if betas.ndim != 1 or len(betas) < 1 or not np.all(np.isfinite(betas) & (betas >= 0)):
      raise ValueError(f"betas must be a non-empty 1-D sequence of finite values >= 0, got "
                       f"{betas!r}")
  with enable_x64():
    keys = _seed_keys(seeds)

    def over_seeds(c):
      return jax.vmap(lambda k: kernel.run_episodes(env, c, num_episodes, k))

    if betas is None:
      timed = timing.compile_and_time(over_seeds(cfg), keys)
    else:
      timed = timing.compile_and_time(
          jax.vmap(lambda b, k: over_seeds(cfg._replace(beta=b))(k), in_axes=(0, None)),
          jnp.asarray(betas), keys)
  return timed.output, timed.compile_seconds, timed.run_seconds[0]


def simulate(env: envs.Env, cfg: kernel.AgentConfig, num_episodes: int,
             seeds: np.ndarray | int) -> kernel.RunOutput:
  """Runs ``num_episodes`` for each seed, vmapped into one compiled program, in float64.

  Args:
    env: the environment.
    cfg: agent hyperparameters.
    num_episodes: ``T >= 1``.
    seeds: int (number of seeds ``0..n-1``) or int array ``[n]`` of seeds.

  Returns:
    :class:`kernel.RunOutput` with a leading ``[n]`` seed axis.
  """
  return simulate_timed(env, cfg, num_episodes, seeds)[0]


class RunSettings(NamedTuple):
  """What a config asks :func:`run` for (``experiment`` and the ``run`` group)."""
  experiment: str       # one of EXPERIMENTS
  num_episodes: int     # T per seed
  seeds: np.ndarray     # [num_seeds] int, seed .. seed + num_seeds - 1


def settings_from_config(config) -> RunSettings:
  """The :class:`RunSettings` of ``config``.

  Raises:
    ValueError: an unknown experiment or a run size below 1, naming the config key.
  """
  experiment = config.experiment
  if experiment not in EXPERIMENTS:
    raise ValueError(
        f"config.experiment must be one of {EXPERIMENTS}, got {experiment!r}")
  num_episodes = int(config.run.num_episodes)
  num_seeds = int(config.run.num_seeds)
  if num_episodes < 1 or num_seeds < 1:
    raise ValueError("config.run.num_episodes and num_seeds must be >= 1, got "
                     f"{num_episodes} and {num_seeds}")
  return RunSettings(experiment, num_episodes, int(config.seed) + np.arange(num_seeds))


@dataclasses.dataclass(frozen=True)
class AgentResult:
  """One agent's run over every seed (lists have a leading [seeds] axis)."""
  num_seeds: int
  num_episodes: int
  feature_dim: int
  horizon: int
  dH: int                                  # d H, Lemma 3's bound on out-of-span episodes
  regret: list[list[float]]                # [seeds, T]
  cumulative_regret: list[float]           # [seeds]
  mean_regret_last100: list[float]         # [seeds]
  out_of_span_episodes: list[int]          # [seeds]
  out_of_span: list[list[int]]             # [seeds, T] 0 / 1
  final_rank: list[int]                    # [seeds] sum_h rank
  final_q_weights: list                    # [seeds, H, d] the last plan
  lemma2_max_gap_in_span: float | None     # None: no in-span episode
  nonconcave_steps: list[int]              # [seeds]
  nonconcave_fraction: float
  history_overflow: list[int]              # [seeds] (0)
  min_regret: float
  compile_seconds: float
  run_seconds: float
  episodes_per_second_per_seed: float
  agent_config: dict[str, Any] | None = None
  shared_program: list[str] | None = None  # labels compiled as one program (betas)
  first_goal_episode: list[int] | None = None  # deep_sea: [seeds], -1 if never
  riccati_gains: list[float] | None = None     # lqr
  max_gain_error: list[float] | None = None    # lqr: [seeds]
  all_steps_spanned: list[bool] | None = None  # lqr: [seeds]


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What :func:`run` returns (and writes as ``results.json``)."""
  experiment: str
  config: dict[str, Any]
  agents: dict[str, AgentResult]   # {label: result}
  summary: list[dict[str, Any]]    # per agent: mean / std over seeds (results.summarize)


SUMMARY_METRICS = ("cumulative_regret", "mean_regret_last100", "out_of_span_episodes")


def summarise(env: envs.Env, out: kernel.RunOutput, compile_s: float,
              run_s: float) -> AgentResult:
  """The :class:`AgentResult` of a seed-batched :class:`kernel.RunOutput`."""
  m = jax.tree.map(np.asarray, out.metrics)
  regret = m.regret  # [seeds, T]
  num_seeds, num_episodes = regret.shape
  in_span = ~m.out_of_span
  gap = np.abs(m.predicted_value - m.predicted_reward)
  last = min(100, num_episodes)
  return AgentResult(
      num_seeds=num_seeds,
      num_episodes=num_episodes,
      feature_dim=env.feature_dim,
      horizon=env.horizon,
      dH=env.feature_dim * env.horizon,
      regret=regret.tolist(),
      cumulative_regret=regret.sum(1).tolist(),
      mean_regret_last100=regret[:, -last:].mean(1).tolist(),
      out_of_span_episodes=m.out_of_span.sum(1).astype(int).tolist(),
      out_of_span=m.out_of_span.astype(int).tolist(),
      final_rank=np.asarray(out.final_rank).sum(1).astype(int).tolist(),
      final_q_weights=np.asarray(out.final_q_weights).tolist(),
      lemma2_max_gap_in_span=float(gap[in_span].max()) if in_span.any()
      else None,
      nonconcave_steps=m.nonconcave.sum(1).astype(int).tolist(),
      nonconcave_fraction=float(m.nonconcave.sum() /
                                (num_seeds * num_episodes * env.horizon)),
      history_overflow=np.asarray(out.overflow).astype(int).tolist(),
      min_regret=float(regret.min()),
      compile_seconds=compile_s,
      run_seconds=run_s,
      episodes_per_second_per_seed=num_episodes * num_seeds / max(run_s,
                                                                   1e-9),
  )


def _first_success(regret: np.ndarray) -> list[int]:
  """First episode (0-based) with regret < 0.5 per seed (DeepSea goal), -1 if none."""
  hit = regret < 0.5
  return [int(np.argmax(row)) if row.any() else -1 for row in hit]


def lqr_gain_errors(env: envs.Env, out: kernel.RunOutput) -> dict[str, Any]:
  """Greedy gains of the final plan against Riccati, on fully spanned seeds."""
  info = env.info
  x_max, u_max, scale = envs.lqr_scales(env)
  del x_max, u_max
  gains, _, _ = envs.lqr_riccati(info["a"], info["b"], info["q"] / scale,
                                 info["r"] / scale, env.horizon)
  q_weights = np.asarray(out.final_q_weights)  # [seeds, H, 6]
  ranks = np.asarray(out.final_rank)  # [seeds, H]
  errors, spanned = [], []
  for s in range(q_weights.shape[0]):
    full = bool(np.all(ranks[s] == env.feature_dim))
    spanned.append(full)
    ours = envs.lqr_gains_from_weights(env, q_weights[s])
    # The last step's Riccati gain is 0 and ours is -th_xu / th_uu with
    # th_xu ~ round-off: compare absolutely.
    errors.append(float(np.max(np.abs(ours - gains))))
  return dict(riccati_gains=gains.tolist(), max_gain_error=errors,
              all_steps_spanned=spanned)


class Job(NamedTuple):
  """One compiled program: an agent on an environment (several labels: one per beta)."""
  labels: list[str]
  env: envs.Env
  cfg: kernel.AgentConfig
  betas: tuple[float, ...] | None  # LSVI-UCB bonus scales vmapped in one program


def experiment_jobs(experiment: str, spec) -> list[Job]:
  """The programs of ``experiment`` from its config group ``spec`` (inside x64)."""
  jobs = []
  if experiment == "deep_sea":
    env = envs.deep_sea(**dict(spec.env))
    for name in spec.agents:
      if name == "lsvi_ucb":
        # Every bonus scale in one program (beta is traced): one compile, not one each.
        betas = tuple(float(b) for b in spec.ucb_betas)
        jobs.append(Job([f"lsvi_ucb(beta={b:g})" for b in betas], env,
                        agent_config(name, spec.agent, beta=max(betas)), betas))
      else:
        jobs.append(Job([name], env, agent_config(name, spec.agent), None))
  elif experiment == "linear_system":
    for k in spec.num_actions_grid:
      env = envs.linear_system(num_actions=int(k), **dict(spec.env))
      for name in spec.agents:
        jobs.append(Job([f"{name}(K={int(k)})"], env, agent_config(name, spec.agent), None))
  else:
    env = envs.lqr(**dict(spec.env))
    for name in spec.agents:
      jobs.append(Job([name], env, agent_config(name, spec.agent), None))
  return jobs


def run_job(job: Job, settings: RunSettings) -> dict[str, AgentResult]:
  """Compiles and runs one :class:`Job` on every seed: ``{label: AgentResult}``."""
  out, compile_s, run_s = simulate_timed(job.env, job.cfg, settings.num_episodes,
                                         settings.seeds, job.betas)
  if job.betas is None:
    betas, outs = [None], [out]
  else:  # one program for every beta: split its leading beta axis
    betas = job.betas
    outs = [jax.tree.map(lambda a, i=i: a[i], out) for i in range(len(betas))]
  agents = {}
  for label, beta, one in zip(job.labels, betas, outs):
    extra: dict[str, Any] = dict(
        agent_config=(job.cfg if beta is None else job.cfg._replace(beta=beta))._asdict())
    if len(job.labels) > 1:
      extra["shared_program"] = job.labels  # compile/run seconds are for all of them
    if settings.experiment == "deep_sea":
      extra["first_goal_episode"] = _first_success(np.asarray(one.metrics.regret))
    if settings.experiment == "lqr":
      extra.update(lqr_gain_errors(job.env, one))
    agents[label] = dataclasses.replace(summarise(job.env, one, compile_s, run_s),
                                        **extra)
  return agents


def seed_summary(agents: dict[str, AgentResult], seeds: np.ndarray
                 ) -> list[dict[str, Any]]:
  """Mean and std over seeds of :data:`SUMMARY_METRICS`, one row per agent."""
  rows = [dict(agent=label, seed=int(seed),
               **{name: getattr(r, name)[i] for name in SUMMARY_METRICS})
          for label, r in agents.items() for i, seed in enumerate(seeds)]
  return results.summarize(rows, SUMMARY_METRICS, by=("agent",), count="num_seeds")


def run(config, workdir: str | pathlib.Path | None = None) -> RunResult:
  """Runs the experiment of ``config``; writes ``results.json`` to ``workdir``.

  Args:
    config: a config from ``configs/default.py``.
    workdir: output folder, or None (in memory only).

  Returns:
    A :class:`RunResult`.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  settings = settings_from_config(config)
  agents: dict[str, AgentResult] = {}
  with enable_x64():
    for job in experiment_jobs(settings.experiment, config[settings.experiment]):
      done = run_job(job, settings)
      agents.update(done)
      means = {row["agent"]: row for row in seed_summary(done, settings.seeds)}
      for label, r in done.items():
        print(f"[linear_rl] {settings.experiment} {label}: cumulative regret "
              f"{means[label]['cumulative_regret']:.2f} (mean of "
              f"{len(settings.seeds)} seeds), out-of-span "
              f"{max(r.out_of_span_episodes)} <= dH = {r.dH}, "
              f"compile {r.compile_seconds:.1f}s run {r.run_seconds:.1f}s"
              + (f" (one program for {len(job.labels)} betas)"
                 if len(job.labels) > 1 else ""),
              flush=True)
  result = RunResult(experiment=settings.experiment, config=config_lib.to_dict(config),
                     agents=agents, summary=seed_summary(agents, settings.seeds))
  results.write(result, workdir)
  return result
