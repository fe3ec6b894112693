"""``run(config, workdir)``: DSM backbone -> covariance heads -> evaluation of every method.

Two stages (``core.stages``): ``dsm`` (``workdir/dsm``) trains the eps network; ``heads``
(``workdir/heads``) trains the OCM, SN-DPM and NPR-DPM heads on the frozen EMA backbone;
then the Analytic-DPM table is estimated and every method is evaluated (K-step NELBO,
samples, head error). Each stage resumes from its own checkpoints. ``run`` returns a
:class:`Result`.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlib_papers.core import compiler, contract, results, stages
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.ocm import data as data_lib
from jaxlib_papers.ocm import diffusion, evaluate, gmm, kernel, models
from jaxlib_papers.ocm.configs import default as default_config

# The config groups each stage depends on (its resume fingerprint). ``dsm_steps`` makes the
# heads depend on how long the backbone they sit on was trained.
DSM_GROUPS = ("data", "schedule", "model", "dsm")
HEAD_GROUPS = ("data", "schedule", "model", "dsm", "heads", "dsm_steps")


class Optim(NamedTuple):
  """Clipped Adam on a warmup-cosine learning rate."""
  lr: float
  warmup_steps: int
  total_steps: int      # optimiser steps of the stage (the cosine's length)
  grad_clip: float


class StageSettings(NamedTuple):
  """One training stage's loop: its batches and optimiser."""
  num_steps: int        # optimiser steps
  steps_per_call: int   # optimiser steps per compiled call (one lax.scan)
  batch_size: int
  data_seed: int
  optim: Optim


class Settings(NamedTuple):
  """The training program of a config (:func:`settings_from_config`)."""
  dsm: kernel.DSMSettings
  heads: kernel.HeadSettings
  dsm_stage: StageSettings
  head_stage: StageSettings


@dataclasses.dataclass(frozen=True)
class Result:
  """What :func:`run` returns; ``results.json`` holds every field but the in-memory ones.

  The evaluation fields are empty when ``run(..., evaluate_methods=False)``; they are keyed
  by K (``nelbo[K][method]`` in nats/dim) or by t (``head_error[t][method]``).
  """
  dsm_history: list[dict[str, float]]    # the DSM stage's loop rows (empty when skipped)
  head_history: list[dict[str, float]]   # the heads stage's loop rows
  methods: list[str] = dataclasses.field(default_factory=list)  # the evaluated methods
  nelbo: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  terms: dict[int, dict[str, list[float]]] = dataclasses.field(default_factory=dict)
  mmd: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  mmd_ddim: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  fid: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  bpd: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  head_error: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  # The "jacobian" diagnostic beside OCM and exact on eval.jacobian_points held-out points.
  jacobian_nelbo: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  jacobian_points: int = 0
  samples: dict[int, dict[str, np.ndarray]] = results.in_memory()  # first quality K only
  backbone: Any = results.in_memory()      # trained (EMA) eps-network params
  head_params: Any = results.in_memory()   # {head name: EMA head params}
  gamma: Any = results.in_memory()         # [N + 1] Analytic-DPM table (None without it)
  trained: Any = results.in_memory()       # the kernel.Methods evaluated
  model: Any = results.in_memory()
  head_model: Any = results.in_memory()
  schedule: Any = results.in_memory()
  mixture: Any = results.in_memory()       # gmm.GaussianMixture (vector data) or None


def _optimizer(optim: Optim) -> optax.GradientTransformation:
  total = optim.total_steps
  warmup = max(1, min(int(optim.warmup_steps), max(total - 1, 1)))
  schedule = optax.warmup_cosine_decay_schedule(0.0, optim.lr, warmup, max(total, warmup + 1),
                                                end_value=0.1 * optim.lr)
  return optax.chain(optax.clip_by_global_norm(optim.grad_clip), optax.adam(schedule))


def _chunk(source: Callable[[int], np.ndarray], steps_per_call: int):
  """data(call) -> [B, steps_per_call, ...]: the step axis second so the batch axis stays
  sharded ([B, ...] for one step per call)."""
  if steps_per_call == 1:
    return source

  def data(call: int) -> np.ndarray:
    parts = [source(call * steps_per_call + i) for i in range(steps_per_call)]
    return np.stack(parts, axis=1)

  return data


def _vector_parts(config: ml_collections.ConfigDict, schedule: diffusion.Schedule
                  ) -> dict[str, Any]:
  m = config.model
  if m.kind != "mlp":
    raise ValueError(f"config.model.kind must be 'mlp' for vector data {config.data.name!r}, "
                     f"got {m.kind!r}")
  mix = data_lib.make_mixture(config)
  rng = np.random.default_rng(config.eval.seed + 12345)
  eval_data = data_lib.sample_mixture_numpy(mix, rng, config.eval.num_nelbo)
  reference = data_lib.sample_mixture_numpy(mix, rng, config.eval.num_samples)
  return dict(
      eval_data=eval_data, reference=reference, oracle=gmm.GMMOracle(mix, schedule.abar),
      model=models.MLPBackbone(width=m.width, depth=m.depth, time_embed_dim=m.time_embed_dim),
      head_model=models.VectorHead(out_dim=mix.dim, hidden=(m.head_hidden,) * m.head_depth),
      make_source=lambda batch, seed: data_lib.mixture_source(mix, batch, seed),
      mixture=mix, shape=(mix.dim,))


def _image_parts(config: ml_collections.ConfigDict) -> dict[str, Any]:
  name, m = config.data.name, config.model
  if m.kind != "unet":
    raise ValueError(f"config.model.kind must be 'unet' for images, got {m.kind!r}")
  if name == "cifar10":
    limit = None if config.data.train_limit < 0 else config.data.train_limit
    images = data_lib.load_cifar10("train", limit)
    eval_data = data_lib.load_cifar10(config.data.eval_split, config.eval.num_nelbo)
  else:  # digits: 8x8 grey images shipped with scikit-learn (the cpu-size image path)
    images = data_lib.load_digits("train")
    eval_data = data_lib.load_digits("test")[:config.eval.num_nelbo]
  flip = name == "cifar10"  # digits are not mirror-symmetric
  return dict(
      eval_data=eval_data, reference=None, oracle=None, mixture=None,
      model=models.UNet(base_channels=m.base_channels, channel_mults=tuple(m.channel_mults),
                        blocks_per_level=m.blocks_per_level),
      head_model=models.ImageHead(out_channels=images.shape[-1], hidden=m.head_hidden),
      make_source=lambda batch, seed: data_lib.image_source(images, batch, seed, flip=flip),
      shape=images.shape[1:])


def _user_parts(config: ml_collections.ConfigDict, x: np.ndarray) -> dict[str, Any]:
  """A user's samples ``x`` ([N, D] or [N, H, W, C]): the last ``eval.num_nelbo`` of a
  seeded shuffle are held out for the NELBO (and, for vectors, the MMD reference)."""
  m = config.model
  want = "mlp" if x.ndim == 2 else "unet"
  if m.kind != want:
    raise ValueError(f"config.model.kind must be {want!r} for data of shape {x.shape}; got "
                     f"{m.kind!r}")
  x = x[np.random.default_rng(int(config.seed)).permutation(x.shape[0])]
  num_eval = min(int(config.eval.num_nelbo), x.shape[0] // 2)
  train_x, eval_data = x[:-num_eval], x[-num_eval:]
  if x.ndim == 2:
    model = models.MLPBackbone(width=m.width, depth=m.depth, time_embed_dim=m.time_embed_dim)
    head = models.VectorHead(out_dim=x.shape[1], hidden=(m.head_hidden,) * m.head_depth)
  else:
    model = models.UNet(base_channels=m.base_channels, channel_mults=tuple(m.channel_mults),
                        blocks_per_level=m.blocks_per_level)
    head = models.ImageHead(out_channels=x.shape[-1], hidden=m.head_hidden)
  return dict(
      eval_data=eval_data, reference=eval_data if x.ndim == 2 else None, oracle=None,
      mixture=None, model=model, head_model=head, shape=x.shape[1:],
      make_source=lambda batch, seed: data_lib.array_source(train_x, batch, seed))


def build(config: ml_collections.ConfigDict, dataset: np.ndarray | None = None
          ) -> dict[str, Any]:
  """Schedule, networks and data of ``config`` (no training).

  Args:
    config: the config.
    dataset: the user's samples (``data.check_samples``: [N, D] or [N, H, W, C] in
      [-1, 1]) instead of ``config.data.name`` (default: ``config.data.path`` if set).

  Returns:
    dict with schedule, model, head_model, make_source ((batch, seed) -> data(step) ->
    [batch, ...]), eval_data, reference, oracle, mixture, shape.
  """
  schedule = diffusion.make_schedule(config.schedule.kind, config.schedule.num_steps)
  name = config.data.name
  if dataset is None and str(config.data.get("path", "") or ""):
    dataset = data_lib.load_samples(config.data.path)
  if dataset is not None:
    parts = _user_parts(config, data_lib.check_samples(dataset))
  elif name in data_lib.VECTOR_DATASETS:
    parts = _vector_parts(config, schedule)
  elif name in data_lib.IMAGE_DATASETS:
    parts = _image_parts(config)
  else:
    raise ValueError(f"config.data.name must be one of "
                     f"{data_lib.VECTOR_DATASETS + data_lib.IMAGE_DATASETS}, got {name!r}")
  return dict(schedule=schedule, **parts)


def settings_from_config(config: ml_collections.ConfigDict, parts: dict[str, Any]
                         ) -> Settings:
  """The training program's settings, read once from ``config`` (and ``build``'s parts).

  ``loop.num_steps`` / ``head_loop.num_steps`` count optimiser steps.
  """
  d, h = config.dsm, config.heads
  dsm_steps, head_steps = int(config.loop.num_steps), int(config.head_loop.num_steps)
  return Settings(
      dsm=kernel.DSMSettings(parts["model"], parts["schedule"], d.ema_decay),
      heads=kernel.HeadSettings(
          parts["model"], parts["head_model"], parts["schedule"], heads=tuple(h.names),
          num_probes=h.num_probes, ema_decay=h.ema_decay, param=h.param, loss=h.loss),
      dsm_stage=StageSettings(dsm_steps, int(d.steps_per_call), d.batch_size, config.seed,
                              Optim(d.lr, d.warmup_steps, dsm_steps, d.grad_clip)),
      head_stage=StageSettings(head_steps, int(h.steps_per_call), h.batch_size,
                               config.seed + 1, Optim(h.lr, h.warmup_steps, head_steps, 1.0)))


def _kernels(settings: Settings, example_x: jax.Array
             ) -> tuple[contract.TrainKernel, Callable[[Any], contract.TrainKernel]]:
  """The DSM kernel and ``backbone -> head kernel``."""
  s = settings.dsm
  dsm = kernel.make_dsm_kernel(s.model, s.schedule, _optimizer(settings.dsm_stage.optim),
                               example_x, ema_decay=s.ema_decay,
                               steps_per_call=settings.dsm_stage.steps_per_call)
  heads = lambda backbone: kernel.make_head_kernel(
      settings.heads, _optimizer(settings.head_stage.optim), example_x, backbone,
      steps_per_call=settings.head_stage.steps_per_call)
  return dsm, heads


def _stage(name: str, make_kernel, stage: StageSettings, make_source, **fields
           ) -> stages.Stage:
  data = _chunk(make_source(stage.batch_size, stage.data_seed), stage.steps_per_call)
  return stages.Stage(name, make_kernel, stage.num_steps, stage.steps_per_call, data,
                      carry=lambda state: jax.device_get(state.ema_params), **fields)


def _untrained(train_kernel: contract.TrainKernel, seed: int) -> Any:
  """The initial EMA params of a stage of 0 steps (which ``run_stages`` skips)."""
  return jax.device_get(jax.jit(train_kernel.init)(jax.random.key(int(seed))).ema_params)


def train(config: ml_collections.ConfigDict, workdir: pathlib.Path | None, parts: dict,
          *, mesh: jax.sharding.Mesh | None = None, backbone: Any = None
          ) -> tuple[stages.StagesResult, Any, Any]:
  """Runs the two stages; returns (their result, backbone, head params), params on host."""
  settings = settings_from_config(config, parts)
  dsm_kernel, head_kernel = _kernels(settings, jnp.zeros((2, *parts["shape"]), jnp.float32))
  staged = config.copy_and_resolve_references()
  with staged.unlocked():  # a launcher's config (config_flags) comes locked
    staged.dsm_steps = settings.dsm_stage.num_steps
  options = compiler.named(config.get("compiler_options", "default"))
  program = (
      _stage("dsm", lambda _: dsm_kernel,
             settings.dsm_stage._replace(num_steps=0 if backbone is not None
                                         else settings.dsm_stage.num_steps),
             parts["make_source"], groups=DSM_GROUPS, compiler_options=options),
      _stage("heads", head_kernel, settings.head_stage, parts["make_source"],
             groups=HEAD_GROUPS, loop=config.head_loop.to_dict(), compiler_options=options),
  )
  initial = backbone
  if initial is None and not settings.dsm_stage.num_steps:
    initial = _untrained(dsm_kernel, config.seed)
  out = stages.run_stages(program, staged, workdir, initial=initial, mesh=mesh, name="ocm")
  backbone = (jax.device_get(out.states["dsm"].ema_params) if "dsm" in out.states
              else initial)
  head_params = (out.carried if "heads" in out.states
                 else _untrained(head_kernel(backbone), config.seed))
  return out, backbone, head_params


def _evaluate(config: ml_collections.ConfigDict, parts: dict, backbone: Any, head_params: Any,
              fid_fn: Callable[[np.ndarray], float] | None, verbose: bool
              ) -> tuple[kernel.Methods, dict[str, Any]]:
  """The Analytic-DPM table, then every method's evaluation (``evaluate.evaluate``)."""
  schedule, model = parts["schedule"], parts["model"]
  k_gamma, k_eval = jax.random.split(jax.random.key(config.eval.seed))
  gamma = None
  if "analytic" in config.eval.methods:
    gamma_ts = evaluate.gamma_timesteps(config, schedule.num_steps)
    gamma_data = jnp.asarray(parts["eval_data"][:config.eval.analytic_samples])
    gamma = jax.jit(lambda x, k: kernel.analytic_gamma(model, backbone, schedule, x, k,
                                                       gamma_ts))(gamma_data, k_gamma)
  methods = kernel.Methods(model=model, backbone=backbone, head_model=parts["head_model"],
                           head_params=head_params, gamma=gamma, oracle=parts["oracle"],
                           max_var=config.eval.max_var, head_param=config.heads.param)
  return methods, evaluate.evaluate(
      methods, schedule, config, eval_data=parts["eval_data"], reference=parts["reference"],
      key=k_eval, fid_fn=fid_fn, verbose=verbose)


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        fid_fn: Callable[[np.ndarray], float] | None = None, evaluate_methods: bool = True,
        verbose: bool | None = None, mesh: jax.sharding.Mesh | None = None,
        backbone: Any = None, dataset: np.ndarray | None = None) -> Result:
  """Trains the backbone and the heads, then evaluates every covariance method.

  Args:
    config: from ``configs/default.py:get_config``.
    workdir: folder for checkpoints / metrics / ``results.json``; None runs in memory.
    fid_fn: optional ``images [n, H, W, C] in [-1, 1] -> FID`` (image data only).
    evaluate_methods: False stops after training (benchmarks, tests of the training path).
    verbose: print the evaluation's rows (default: unless ``loop.quiet``).
    mesh: the training mesh (default: every device).
    backbone: trained eps-network params (e.g. ``run(...).backbone`` of a run with the
      same data / schedule / model / dsm config): skips the DSM stage, so several head
      settings share one backbone.
    dataset: your own samples, [N, D] vectors or [N, H, W, C] images in [-1, 1]
      (``config.data.path`` names a ``.npy`` file of them from the launcher): shapes come
      from the data, the last ``eval.num_nelbo`` (at most half) of a seeded shuffle is
      held out for the NELBO and the MMD, and ``exact`` (which needs the known mixture)
      is skipped.

  Returns:
    A :class:`Result`.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  parts = build(config, dataset)
  if evaluate_methods:  # before any training: the methods the data can afford
    evaluate.check_methods(config.eval.methods, parts["shape"])
  verbose = (not config.loop.get("quiet", False)) if verbose is None else verbose
  workdir = None if workdir is None else pathlib.Path(workdir)
  out, backbone, head_params = train(config, workdir, parts, mesh=mesh, backbone=backbone)
  fields = dict(dsm_history=out.histories.get("dsm", []),
                head_history=out.histories.get("heads", []), backbone=backbone,
                head_params=head_params, model=parts["model"],
                head_model=parts["head_model"], schedule=parts["schedule"],
                mixture=parts["mixture"])
  if evaluate_methods:
    methods, evaluation = _evaluate(config, parts, backbone, head_params, fid_fn, verbose)
    fields.update(evaluation, trained=methods,
                  gamma=None if methods.gamma is None else np.asarray(methods.gamma))
  result = Result(**fields)
  if workdir is not None and jax.process_index() == 0:
    results.write(result, workdir)
  return result
