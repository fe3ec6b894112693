"""Training and evaluation pipelines: ``run(config, workdir)`` for the launcher and demo.

* task ``vmf``: train every run (seeds x variants) in one stage (``core.stages``), then
  evaluate the trained and the untrained encoders on fresh samples (the paper's protocol,
  ``kernel.make_kernel(...).evaluate``) with the raw-x baseline: a :class:`VmfResult`.
* task ``sprites``: CE on the sprite shape, linear decoding of every factor from the last
  hidden layer, against raw pixels and the untrained encoder: a :class:`SpritesResult`.

Both write their result (in-memory fields left out) as ``workdir/results.json``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import distributed, results, stages
from jaxlib_papers.identifiability import data as data_lib
from jaxlib_papers.identifiability import kernel as kernel_lib
from jaxlib_papers.identifiability import sprites as sprites_lib
from jaxlib_papers.identifiability.configs import default as default_config

MAIN_METRICS = ("r2_z", "r2_z_no_intercept", "sv_mae_z", "r2_head", "r2_head_no_intercept",
                "sv_mae_head", "head_cosine", "model_ce", "bayes_ce", "temperature",
                "r2_x", "r2_x_no_intercept", "r2_z_untrained", "r2_z_untrained_no_intercept")


@dataclasses.dataclass(frozen=True)
class VmfResult:
  """What a ``vmf`` run returns.

  Attributes:
    rows: one dict per run: seed, kappa, normalize_head, every metric of
      ``kernel.evaluate`` for the trained encoder, ``r2_z_untrained(_no_intercept)``.
    summary: per variant (kappa, normalize_head) over seeds: mean, ``_std``, ``_min``.
    history: the train loop's metrics per call (``step`` in optimiser steps;
      ``r2_batch`` is the in-batch R^2 learning curve).
    timings: seconds of ``train`` and ``eval``.
    optimizer_steps: Adam steps every run took.
  """
  rows: list[dict[str, Any]]
  summary: list[dict[str, Any]]
  history: list[dict[str, float]]
  timings: dict[str, float]
  optimizer_steps: int
  state: Any = results.in_memory()       # kernel.TrainState, leading run axis
  kernel: Any = results.in_memory()      # the TrainKernel (``features``, ``evaluate``)
  settings: Any = results.in_memory()    # kernel.Settings
  variants: Any = results.in_memory()    # kernel.Variants


@dataclasses.dataclass(frozen=True)
class SpritesResult:
  """What a ``sprites`` run returns.

  Attributes:
    r: {"trained" | "untrained" | "pixels": [S, 4] Pearson r on validation}, factors in
      ``factors`` order.
    factors: ``sprites.FACTORS``.
    val_accuracy: [S] shape accuracy of the trained readout on validation.
    history: the train loop's metrics per call.
    timings: seconds of ``train``.
    num_images: size of the rendered set.
  """
  r: dict[str, np.ndarray]
  factors: tuple[str, ...]
  val_accuracy: np.ndarray
  history: list[dict[str, float]]
  timings: dict[str, float]
  num_images: int


def settings_from_config(config: ml_collections.ConfigDict) -> kernel_lib.Settings:
  """The kernel's static settings of a ``vmf`` config."""
  dim = int(config.dgp.dim)
  hidden = tuple(int(h) for h in config.model.hidden) or tuple(
      m * dim for m in (10, 50, 50, 50, 50, 10))
  return kernel_lib.Settings(
      dim=dim, num_classes=int(config.dgp.num_classes),
      num_indices=int(config.dgp.num_indices), objective=str(config.objective.kind),
      conditional=str(config.dgp.conditional),
      normalize_features=bool(config.objective.normalize_features), hidden=hidden,
      batch_norm=bool(config.model.batch_norm),
      negative_slope=float(config.model.negative_slope),
      batch_size=int(config.optim.batch_size),
      learning_rate=float(config.optim.learning_rate),
      decay_steps=int(config.loop.num_steps) if bool(config.optim.cosine_decay) else 0,
      steps_per_call=int(config.optim.steps_per_call),
      num_proposals=int(config.dgp.num_proposals),
      mixing_layers=int(config.dgp.mixing_layers),
      mixing_candidates=int(config.dgp.mixing_candidates))


def variants_from_config(config: ml_collections.ConfigDict) -> kernel_lib.Variants:
  """The runs (seeds x kappas x normalize_head) of a ``vmf`` config."""
  return kernel_lib.make_variants(int(config.num_seeds), tuple(config.dgp.kappas),
                                  tuple(config.objective.normalize_head))


def sprites_settings_from_config(config: ml_collections.ConfigDict
                                 ) -> sprites_lib.SpritesSettings:
  """The sprites kernel's static settings of a ``sprites`` config."""
  cfg = config.sprites
  return sprites_lib.SpritesSettings(
      num_classes=len(data_lib.SPRITE_SHAPES), hidden=tuple(int(h) for h in cfg.hidden),
      batch_size=int(cfg.batch_size), learning_rate=float(cfg.learning_rate),
      steps_per_call=int(cfg.steps_per_call))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Mean, std, min over seeds of every metric, per variant (kappa, normalize_head)."""
  return results.summarize(rows, MAIN_METRICS, by=("kappa", "normalize_head"),
                           stats=("mean", "std", "min"), count="seeds")


def _train(kernel: Any, steps_per_call: int, config: ml_collections.ConfigDict,
           workdir: str | pathlib.Path | None, name: str) -> stages.StagesResult:
  """The one training stage (resumable in ``workdir/train``)."""
  stage = stages.Stage("train", lambda _: kernel, num_steps=int(config.loop.num_steps),
                       steps_per_call=steps_per_call)
  return stages.run_stages((stage,), config, workdir, name=name)


def _vmf_rows(variants: kernel_lib.Variants, trained: dict[str, np.ndarray],
              untrained: dict[str, np.ndarray]) -> list[dict[str, Any]]:
  rows = []
  for r in range(variants.kappa.shape[0]):
    row: dict[str, Any] = {"seed": int(variants.seed_index[r]),
                           "kappa": float(variants.kappa[r]),
                           "normalize_head": bool(variants.normalize_head[r])}
    row.update({k: float(v[r]) for k, v in trained.items()})
    row["r2_z_untrained"] = float(untrained["r2_z"][r])
    row["r2_z_untrained_no_intercept"] = float(untrained["r2_z_no_intercept"][r])
    rows.append(row)
  return rows


def run_vmf(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None
            ) -> VmfResult:
  """Trains and evaluates the vMF-mixture runs of ``config`` (see :class:`VmfResult`)."""
  settings = settings_from_config(config)
  variants = variants_from_config(config)
  kernel = kernel_lib.make_kernel(settings, variants)
  trained_run = _train(kernel, settings.steps_per_call, config, workdir, "identifiability")
  state = trained_run.states["train"]

  start = time.perf_counter()
  num_samples = int(config.eval.num_samples)
  evaluate = jax.jit(kernel.evaluate, static_argnums=2)
  eval_key = jax.random.key(int(config.eval.seed))
  trained = jax.device_get(evaluate(state, eval_key, num_samples))
  # The loop's own init program (same function and output sharding: no second compile), so
  # the untrained state also has the trained one's sharding and ``evaluate`` compiles once.
  untrained_state = jax.jit(kernel.init, out_shardings=distributed.replicated(
      distributed.make_mesh()))(jax.random.key(int(config.seed)))
  untrained = jax.device_get(evaluate(untrained_state, eval_key, num_samples))
  eval_seconds = time.perf_counter() - start

  rows = _vmf_rows(variants, trained, untrained)
  result = VmfResult(
      rows=rows, summary=summarize(rows), history=trained_run.histories["train"],
      timings={"train": trained_run.seconds["train"], "eval": eval_seconds},
      optimizer_steps=int(np.asarray(state.step)[0]), state=state, kernel=kernel,
      settings=settings, variants=variants)
  results.write(result, workdir)
  return result


def _decode_one(kernel, arrays, params, batch_stats, train_idx, val_idx):
  """One seed's decoding: (r of the representation [4], r of pixels [4], val accuracy)."""
  images, factors, shape = arrays
  h_tr = kernel.representation(params, batch_stats, images[train_idx])
  h_va = kernel.representation(params, batch_stats, images[val_idx])
  r_model = sprites_lib.decode_r(h_tr, factors[train_idx], h_va, factors[val_idx])
  r_pixels = sprites_lib.decode_r(images[train_idx], factors[train_idx], images[val_idx],
                                  factors[val_idx])
  logits = h_va @ params["readout"]["w"] + params["readout"]["b"]
  acc = (logits.argmax(-1) == shape[val_idx]).mean()
  return r_model, r_pixels, acc


def run_sprites(config: ml_collections.ConfigDict,
                workdir: str | pathlib.Path | None = None) -> SpritesResult:
  """Trains the sprites encoder (seeds vmapped) and decodes every factor."""
  cfg = config.sprites
  sprites = data_lib.render_sprites(int(cfg.size), int(cfg.num_scales),
                                    int(cfg.num_positions), int(cfg.supersample))
  images = sprites.images.reshape(sprites.images.shape[0], -1)
  factors = sprites_lib.factor_matrix(sprites)
  splits = [sprites_lib.split_indices(images.shape[0], int(config.seed) + s,
                                      float(cfg.val_fraction), float(cfg.test_fraction))
            for s in range(int(config.num_seeds))]
  train_idx = np.stack([s.train for s in splits])
  val_idx = np.stack([s.val for s in splits])
  settings = sprites_settings_from_config(config)
  kernel = sprites_lib.make_kernel(images, sprites.shape, train_idx, settings)
  trained_run = _train(kernel, settings.steps_per_call, config, workdir,
                       "identifiability/sprites")
  state = trained_run.states["train"]

  # The images are arguments, not closed-over constants: XLA would constant-fold the
  # gathers of the whole image set at compile time (seconds per gather).
  @jax.jit
  def decode_all(params, batch_stats, arrays):
    one = lambda p, bs, tr, va: _decode_one(kernel, arrays, p, bs, tr, va)
    return jax.vmap(one)(params, batch_stats, train_idx, val_idx)

  arrays = tuple(jax.numpy.asarray(a) for a in (images, factors, sprites.shape))
  r_trained, r_pixels, acc = jax.device_get(
      decode_all(state.params, state.batch_stats, arrays))
  init_state = jax.jit(kernel.init)(jax.random.key(int(config.seed)))
  r_untrained, _, _ = jax.device_get(
      decode_all(init_state.params, init_state.batch_stats, arrays))
  result = SpritesResult(
      r={"trained": np.asarray(r_trained), "untrained": np.asarray(r_untrained),
         "pixels": np.asarray(r_pixels)},
      factors=sprites_lib.FACTORS, val_accuracy=np.asarray(acc),
      history=trained_run.histories["train"],
      timings={"train": trained_run.seconds["train"]}, num_images=int(images.shape[0]))
  results.write(result, workdir)
  return result


@dataclasses.dataclass(frozen=True)
class DatasetResult:
  """What a run on a user's data set returns.

  Attributes:
    rows: one dict per seed: ``seed`` and the held-out scores of
      ``kernel.evaluate_fit`` (``model_ce``, ``accuracy`` when supervised; ``r2_z``,
      ``r2_z_no_intercept`` when the data set has latents), each also as
      ``<name>_untrained`` for the encoders at initialisation.
    summary: mean, ``_std``, ``_min`` over seeds.
    history: the train loop's metrics per call.
    shapes: ``num_train``, ``num_eval``, ``input_dim`` (p), ``feature_dim`` (d),
      ``num_labels`` (K) as inferred from the data set.
    timings: seconds of ``train`` and ``eval``.
  """
  rows: list[dict[str, Any]]
  summary: list[dict[str, Any]]
  history: list[dict[str, float]]
  shapes: dict[str, int]
  timings: dict[str, float]
  state: Any = results.in_memory()       # kernel.FitState, leading seed axis
  kernel: Any = results.in_memory()      # the TrainKernel (``features``, ``evaluate``)
  settings: Any = results.in_memory()    # kernel.Settings


class Split(NamedTuple):
  """A data set's training and held-out rows (a seeded permutation, then a cut)."""
  train: np.ndarray    # [N_train] row indices
  held_out: np.ndarray  # [N_eval]


def split_dataset(num: int, holdout_fraction: float, seed: int) -> Split:
  """Rows shuffled by ``seed``, the last ``holdout_fraction`` held out (>= 2 each side)."""
  num_eval = int(round(num * holdout_fraction))
  if num_eval < 2 or num - num_eval < 2:
    raise ValueError(f"dataset: {num} samples leave {num - num_eval} to train and "
                     f"{num_eval} to score at data.holdout_fraction={holdout_fraction}; "
                     "both need at least 2")
  order = np.random.default_rng(seed).permutation(num)
  return Split(order[:num - num_eval], order[num - num_eval:])


def dataset_settings(config: ml_collections.ConfigDict, dataset: data_lib.Dataset,
                     num_train: int) -> kernel_lib.Settings:
  """The kernel's settings with every shape taken from ``dataset``: p from x, d from z
  (``dgp.dim`` without latents), K from the labels (supervised) or ``num_train`` (DIET)."""
  if len(config.objective.normalize_head) != 1:
    raise ValueError("objective.normalize_head takes one value on a user's data set; got "
                     f"{tuple(config.objective.normalize_head)}")
  dim = int(dataset.z.shape[1]) if dataset.z is not None else int(config.dgp.dim)
  with config.unlocked():
    config = config.copy_and_resolve_references()
    config.dgp.dim = dim
  return settings_from_config(config)._replace(
      input_dim=int(dataset.x.shape[1]), num_classes=int(dataset.y.max()) + 1,
      num_indices=int(num_train))


def run_dataset(config: ml_collections.ConfigDict, dataset: data_lib.Dataset,
                workdir: str | pathlib.Path | None = None) -> DatasetResult:
  """Trains the encoder and head on a user's data set (the seeds in one program) and scores them on
  its held-out rows (see :class:`DatasetResult`)."""
  split = split_dataset(dataset.x.shape[0], float(config.data.holdout_fraction),
                        int(config.seed))
  settings = dataset_settings(config, dataset, split.train.shape[0])
  diet = settings.objective == "diet"
  labels = np.arange(split.train.shape[0], dtype=np.int32) if diet else dataset.y[split.train]
  normalize_head = bool(config.objective.normalize_head[0])
  kernel = kernel_lib.make_fit_kernel(settings, int(config.num_seeds), normalize_head)
  data = data_lib.dataset_batches(dataset.x[split.train], labels, settings.batch_size,
                                  settings.steps_per_call, int(config.seed))
  stage = stages.Stage("train", lambda _: kernel, num_steps=int(config.loop.num_steps),
                       steps_per_call=settings.steps_per_call, data=data)
  trained = stages.run_stages((stage,), config, workdir, name="identifiability/dataset")
  state = trained.states["train"]
  start = time.perf_counter()
  held = [None if a is None else jax.numpy.asarray(a[split.held_out])
          for a in (dataset.x, None if diet else dataset.y, dataset.z)]
  scores = jax.device_get(jax.jit(kernel.evaluate)(state, *held))
  rows = [{"seed": s, **{k: float(v[s]) for k, v in scores.items()}}
          for s in range(int(config.num_seeds))]
  untrained = jax.device_get(jax.jit(kernel.evaluate)(
      jax.jit(kernel.init)(jax.random.key(int(config.seed))), *held))
  for s, row in enumerate(rows):
    row.update({f"{k}_untrained": float(v[s]) for k, v in untrained.items()})
  shapes = {"num_train": int(split.train.shape[0]), "num_eval": int(split.held_out.shape[0]),
            "input_dim": settings.input_dim, "feature_dim": settings.dim,
            "num_labels": settings.num_labels}
  result = DatasetResult(
      rows, results.summarize(rows, [k for k in rows[0] if k != "seed"],
                              stats=("mean", "std", "min"), count="seeds"),
      trained.histories["train"], shapes,
      {"train": trained.seconds["train"], "eval": time.perf_counter() - start},
      state=state, kernel=kernel, settings=settings)
  results.write(result, workdir)
  return result


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        dataset: data_lib.Dataset | None = None
        ) -> VmfResult | SpritesResult | DatasetResult:
  """Runs ``config.task`` (``vmf`` or ``sprites``); see :func:`run_vmf`, :func:`run_sprites`.

  With ``dataset`` (a :class:`data.Dataset`, e.g. ``data.as_dataset(x, y, z)``) or
  ``config.data.path`` (an ``.npz`` with ``x``, ``y``[, ``z``]), the ``vmf`` task's encoder
  and head train on that data instead (:func:`run_dataset`).

  Raises:
    ValueError: a config value its constraint forbids (``configs/default.py``), or a data
      set that is not what :func:`data.as_dataset` expects, before anything compiles.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  task = str(config.get("task", "vmf"))
  if dataset is None and str(config.data.path or ""):
    dataset = data_lib.load_dataset(config.data.path)
  if dataset is not None:
    if task != "vmf":
      raise ValueError(f"a user's data set trains the vmf task's encoder; config.task is "
                       f"{task!r}")
    return run_dataset(config, data_lib.as_dataset(*dataset), workdir)
  if task == "vmf":
    return run_vmf(config, workdir)
  if task == "sprites":
    return run_sprites(config, workdir)
  raise ValueError(f"config.task must be 'vmf' or 'sprites'; got {task!r}")
