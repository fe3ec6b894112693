"""``run(config, workdir)``: DSM backbone -> covariance heads -> evaluation of every method.

Stage 1 (``workdir/dsm``) trains the eps network; stage 2 (``workdir/heads``) trains the OCM,
SN-DPM and NPR-DPM heads on the frozen EMA backbone; then the Analytic-DPM table is estimated
and every method is evaluated (K-step NELBO, samples, head error). Each stage resumes from
its own checkpoints.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import train_loop, writers
from jaxlib_papers.ocm import data as data_lib
from jaxlib_papers.ocm import diffusion, evaluate, gmm, kernel, models


def _optimizer(lr: float, warmup: int, total: int, grad_clip: float):
  warmup = max(1, min(int(warmup), max(total - 1, 1)))
  schedule = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(total, warmup + 1),
                                                end_value=0.1 * lr)
  return optax.chain(optax.clip_by_global_norm(grad_clip), optax.adam(schedule))


def _chunk(source: Callable[[int], np.ndarray], steps_per_call: int, batch_size: int):
  """data(call) -> [B, chunk, ...]: the chunk axis second so the batch axis stays sharded."""
  if steps_per_call == 1:
    return source

  def data(call: int) -> np.ndarray:
    parts = [source(call * steps_per_call + i) for i in range(steps_per_call)]
    return np.stack(parts, axis=1)

  del batch_size
  return data


def build(config: ml_collections.ConfigDict):
  """Schedule, networks and data of ``config`` (no training).

  Returns:
    dict with schedule, model, head_model, train_source (data(step) -> [B, ...] for
    batch size 1 call of one step; use make_source), eval_data, reference, oracle, shape.
  """
  schedule = diffusion.make_schedule(config.schedule.kind, config.schedule.num_steps)
  name = config.data.name
  m = config.model
  if name in data_lib.VECTOR_DATASETS:
    if m.kind != "mlp":
      raise ValueError(f"config.model.kind must be 'mlp' for vector data {name!r}, got {m.kind!r}")
    mix = data_lib.make_mixture(config)
    rng = np.random.default_rng(config.eval.seed + 12345)
    eval_data = data_lib.sample_mixture_numpy(mix, rng, config.eval.num_nelbo)
    reference = data_lib.sample_mixture_numpy(mix, rng, config.eval.num_samples)
    oracle = gmm.GMMOracle(mix, schedule.abar)
    model = models.MLPBackbone(width=m.width, depth=m.depth, time_embed_dim=m.time_embed_dim)
    head_model = models.VectorHead(out_dim=mix.dim, hidden=(m.head_hidden,) * m.head_depth)
    make_source = lambda batch, seed: data_lib.mixture_source(mix, batch, seed)
    shape = (mix.dim,)
  elif name in data_lib.IMAGE_DATASETS:
    if m.kind != "unet":
      raise ValueError(f"config.model.kind must be 'unet' for images, got {m.kind!r}")
    if name == "cifar10":
      limit = None if config.data.train_limit < 0 else config.data.train_limit
      images = data_lib.load_cifar10("train", limit)
      eval_data = data_lib.load_cifar10(config.data.eval_split, config.eval.num_nelbo)
    else:  # digits: 8x8 grey images shipped with scikit-learn (the cpu-size image path)
      images = data_lib.load_digits("train")
      eval_data = data_lib.load_digits("test")[:config.eval.num_nelbo]
    reference, oracle, mix = None, None, None
    model = models.UNet(base_channels=m.base_channels, channel_mults=tuple(m.channel_mults),
                        blocks_per_level=m.blocks_per_level)
    head_model = models.ImageHead(out_channels=images.shape[-1], hidden=m.head_hidden)
    flip = name == "cifar10"  # digits are not mirror-symmetric
    make_source = lambda batch, seed: data_lib.image_source(images, batch, seed, flip=flip)
    shape = images.shape[1:]
  else:
    raise ValueError(f"config.data.name must be one of "
                     f"{data_lib.VECTOR_DATASETS + data_lib.IMAGE_DATASETS}, got {name!r}")
  return dict(schedule=schedule, model=model, head_model=head_model, make_source=make_source,
              eval_data=eval_data, reference=reference, oracle=oracle, mixture=mix, shape=shape)


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        fid_fn: Callable[[np.ndarray], float] | None = None, evaluate_methods: bool = True,
        verbose: bool | None = None, mesh: jax.sharding.Mesh | None = None,
        backbone: Any = None) -> dict[str, Any]:
  """Trains the backbone and the heads, then evaluates every covariance method.

  Args:
    config: from ``configs/default.py:get_config``.
    workdir: folder for checkpoints / metrics / ``results.json``; None runs in memory.
    fid_fn: optional ``images [n, H, W, C] in [-1, 1] -> FID`` (image data only).
    evaluate_methods: False stops after training (benchmarks, tests of the training path).
    mesh: the training mesh (default: every device).
    backbone: trained eps-network params (e.g. ``run(...)["backbone"]`` of a run with the
      same data / schedule / model / dsm config): skips the DSM stage, so several head
      settings share one backbone.

  Returns:
    dict with "dsm_history", "head_history", "backbone", "head_params", "gamma", "trained"
    (the :class:`kernel.Methods` of the run) and the
    :func:`evaluate.evaluate` results.
  """
  parts = build(config)
  schedule, model, head_model = parts["schedule"], parts["model"], parts["head_model"]
  verbose = (not config.loop.get("quiet", False)) if verbose is None else verbose
  workdir = None if workdir is None else pathlib.Path(workdir)
  example_x = jnp.zeros((2, *parts["shape"]), jnp.float32)

  d = config.dsm
  dsm_total = config.loop.num_steps * d.steps_per_call
  dsm_kernel = kernel.make_dsm_kernel(
      model, schedule, _optimizer(d.lr, d.warmup_steps, dsm_total, d.grad_clip), example_x,
      ema_decay=d.ema_decay)
  dsm_data = _chunk(parts["make_source"](d.batch_size, config.seed), d.steps_per_call,
                    d.batch_size)
  dsm_config = config_lib.stage_config(config, "dsm", groups=("data", "schedule", "model", "dsm"),
                                       loop=config.loop.to_dict())
  if backbone is None:
    dsm = train_loop.run(dsm_kernel, dsm_data, dsm_config,
                         None if workdir is None else workdir / "dsm", mesh=mesh,
                         name="ocm/dsm")
    backbone = jax.device_get(dsm.state.ema_params)
    dsm_history = dsm.history
  else:
    dsm_history = []

  h = config.heads
  head_total = config.head_loop.num_steps * h.steps_per_call
  head_kernel = kernel.make_head_kernel(
      model, head_model, schedule, _optimizer(h.lr, h.warmup_steps, head_total, 1.0),
      example_x, backbone, heads=tuple(h.names), num_probes=h.num_probes,
      ema_decay=h.ema_decay, param=h.param, loss=h.loss)
  head_data = _chunk(parts["make_source"](h.batch_size, config.seed + 1), h.steps_per_call,
                     h.batch_size)
  head_config = config_lib.stage_config(
      config, "heads", groups=("data", "schedule", "model", "dsm", "heads"),
      loop=config.head_loop.to_dict(), dsm_calls=config.loop.num_steps)
  heads = train_loop.run(head_kernel, head_data, head_config,
                         None if workdir is None else workdir / "heads", mesh=mesh,
                         name="ocm/heads")
  head_params = jax.device_get(heads.state.ema_params)

  result: dict[str, Any] = {
      "dsm_history": dsm_history, "head_history": heads.history,
      "backbone": backbone, "head_params": head_params, "model": model,
      "head_model": head_model, "schedule": schedule, "mixture": parts["mixture"],
  }
  if not evaluate_methods:
    return result

  key = jax.random.key(config.eval.seed)
  k_gamma, k_eval = jax.random.split(key)
  gamma = None
  if "analytic" in config.eval.methods:
    gamma_ts = evaluate.gamma_timesteps(config, schedule.num_steps)
    gamma_data = jnp.asarray(parts["eval_data"][:config.eval.analytic_samples])
    gamma = jax.jit(lambda x, k: kernel.analytic_gamma(model, backbone, schedule, x, k,
                                                       gamma_ts))(gamma_data, k_gamma)
  methods = kernel.Methods(model=model, backbone=backbone, head_model=head_model,
                           head_params=head_params, gamma=gamma, oracle=parts["oracle"],
                           max_var=config.eval.max_var, head_param=h.param)
  result["gamma"] = None if gamma is None else np.asarray(gamma)
  result["trained"] = methods
  result.update(evaluate.evaluate(methods, schedule, config, eval_data=parts["eval_data"],
                                  reference=parts["reference"], key=k_eval, fid_fn=fid_fn,
                                  verbose=verbose))
  if workdir is not None and jax.process_index() == 0:
    summary = {k: result[k] for k in ("nelbo", "bpd", "mmd", "mmd_ddim", "fid", "head_error")}
    writers.write_json(workdir / "results.json", jax.tree.map(float, summary), indent=1,
                       sort_keys=True, default=str)
  return result
