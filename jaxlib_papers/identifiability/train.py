"""Training and evaluation pipelines: ``run(config, workdir)`` for the launcher and demo.

* task ``vmf``: train every run (seeds x variants) in one ``core.train_loop`` program,
  then evaluate the trained and the untrained encoders on fresh samples (the paper's
  protocol, ``kernel.make_kernel(...).evaluate``) with the raw-x baseline.
* task ``sprites``: CE on the sprite shape, linear decoding of every factor from the last
  hidden layer, against raw pixels and the untrained encoder.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxlib_papers.core import distributed, train_loop, writers
from jaxlib_papers.identifiability import data as data_lib
from jaxlib_papers.identifiability import kernel as kernel_lib
from jaxlib_papers.identifiability import sprites as sprites_lib

MAIN_METRICS = ("r2_z", "r2_z_no_intercept", "sv_mae_z", "r2_head", "r2_head_no_intercept",
                "sv_mae_head", "head_cosine", "model_ce", "bayes_ce", "temperature",
                "r2_x", "r2_x_no_intercept", "r2_z_untrained", "r2_z_untrained_no_intercept")


def settings_from_config(config: ml_collections.ConfigDict) -> kernel_lib.Settings:
  """The kernel's static settings of a ``vmf`` config."""
  dim = int(config.dgp.dim)
  hidden = tuple(int(h) for h in config.model.hidden) or tuple(
      m * dim for m in (10, 50, 50, 50, 50, 10))
  steps = int(config.loop.num_steps) * int(config.optim.steps_per_call)
  return kernel_lib.Settings(
      dim=dim, num_classes=int(config.dgp.num_classes),
      num_indices=int(config.dgp.num_indices), objective=str(config.objective.kind),
      conditional=str(config.dgp.conditional),
      normalize_features=bool(config.objective.normalize_features), hidden=hidden,
      batch_norm=bool(config.model.batch_norm),
      negative_slope=float(config.model.negative_slope),
      batch_size=int(config.optim.batch_size),
      learning_rate=float(config.optim.learning_rate),
      decay_steps=steps if bool(config.optim.cosine_decay) else 0,
      steps_per_call=int(config.optim.steps_per_call),
      num_proposals=int(config.dgp.num_proposals),
      mixing_layers=int(config.dgp.mixing_layers),
      mixing_candidates=int(config.dgp.mixing_candidates))


def variants_from_config(config: ml_collections.ConfigDict) -> kernel_lib.Variants:
  return kernel_lib.make_variants(int(config.num_seeds), tuple(config.dgp.kappas),
                                  tuple(config.objective.normalize_head))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Mean, std, min over seeds of every metric, per variant (kappa, normalize_head)."""
  groups: dict[tuple[float, bool], list[dict[str, Any]]] = {}
  for row in rows:
    groups.setdefault((row["kappa"], row["normalize_head"]), []).append(row)
  out = []
  for (kappa, norm), members in groups.items():
    entry: dict[str, Any] = {"kappa": kappa, "normalize_head": norm, "seeds": len(members)}
    for name in MAIN_METRICS:
      if name in members[0]:
        values = np.array([m[name] for m in members], np.float64)
        entry[name] = float(values.mean())
        entry[name + "_std"] = float(values.std())
        entry[name + "_min"] = float(values.min())
    out.append(entry)
  return out


def run_vmf(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None
            ) -> dict[str, Any]:
  """Trains and evaluates the vMF-mixture runs of ``config``.

  Returns:
    ``rows`` (one dict per run: seed, kappa, normalize_head and every metric of
    ``kernel.evaluate`` for the trained encoder, plus ``r2_z_untrained``), ``summary``
    (per variant over seeds), ``history`` (train-loop metrics per call; ``r2_batch`` is
    the in-batch R^2 learning curve), ``timings``, ``state``, ``kernel``, ``settings``.
  """
  settings = settings_from_config(config)
  variants = variants_from_config(config)
  kernel = kernel_lib.make_kernel(settings, variants)
  start = time.perf_counter()
  result = train_loop.run(kernel, None, config, workdir, name="identifiability")
  state = jax.block_until_ready(result.state)
  train_seconds = time.perf_counter() - start

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

  rows = []
  for r in range(variants.kappa.shape[0]):
    row: dict[str, Any] = {"seed": int(variants.seed_index[r]),
                           "kappa": float(variants.kappa[r]),
                           "normalize_head": bool(variants.normalize_head[r])}
    row.update({k: float(v[r]) for k, v in trained.items()})
    row["r2_z_untrained"] = float(untrained["r2_z"][r])
    row["r2_z_untrained_no_intercept"] = float(untrained["r2_z_no_intercept"][r])
    rows.append(row)
  results = {
      "rows": rows, "summary": summarize(rows), "history": result.history,
      "timings": {"train": train_seconds, "eval": eval_seconds},
      "optimizer_steps": int(np.asarray(state.step)[0]),
      "state": state, "kernel": kernel, "settings": settings, "variants": variants,
  }
  if workdir is not None:
    keep = ("rows", "summary", "history", "timings", "optimizer_steps")
    writers.write_json(pathlib.Path(workdir) / "results.json",
                       {k: results[k] for k in keep}, indent=1)
  return results


def run_sprites(config: ml_collections.ConfigDict,
                workdir: str | pathlib.Path | None = None) -> dict[str, Any]:
  """Trains the sprites encoder (seeds vmapped) and decodes every factor.

  Returns:
    ``r`` ({"trained" | "untrained" | "pixels": [S, 4] Pearson r on validation, factors
    in ``sprites.FACTORS`` order}), ``val_accuracy`` [S], ``history``, ``timings``.
  """
  cfg = config.sprites
  sprites = data_lib.render_sprites(int(cfg.size), int(cfg.num_scales),
                                    int(cfg.num_positions), int(cfg.supersample))
  images = sprites.images.reshape(sprites.images.shape[0], -1)
  factors = sprites_lib.factor_matrix(sprites)
  num_seeds = int(config.num_seeds)
  splits = [sprites_lib.split_indices(images.shape[0], int(config.seed) + s,
                                      float(cfg.val_fraction), float(cfg.test_fraction))
            for s in range(num_seeds)]
  kernel = sprites_lib.make_kernel(
      images, sprites.shape, np.stack([s.train for s in splits]),
      num_classes=len(data_lib.SPRITE_SHAPES), hidden=tuple(int(h) for h in cfg.hidden),
      batch_size=int(cfg.batch_size), learning_rate=float(cfg.learning_rate),
      steps_per_call=int(cfg.steps_per_call))
  start = time.perf_counter()
  result = train_loop.run(kernel, None, config, workdir, name="identifiability/sprites")
  state = jax.block_until_ready(result.state)
  train_seconds = time.perf_counter() - start

  train_idx = np.stack([s.train for s in splits])
  val_idx = np.stack([s.val for s in splits])
  images_j, factors_j = jax.numpy.asarray(images), jax.numpy.asarray(factors)
  shape_j = jax.numpy.asarray(sprites.shape)

  # The images are arguments, not closed-over constants: XLA would constant-fold the
  # gathers of the whole image set at compile time (seconds per gather).
  @jax.jit
  def decode_all(params, batch_stats, images_j, factors_j, shape_j):
    def one(p, bs, tr, va):
      h_tr = kernel.representation(p, bs, images_j[tr])
      h_va = kernel.representation(p, bs, images_j[va])
      r_model = sprites_lib.decode_r(h_tr, factors_j[tr], h_va, factors_j[va])
      r_pixels = sprites_lib.decode_r(images_j[tr], factors_j[tr], images_j[va],
                                      factors_j[va])
      logits = h_va @ p["readout"]["w"] + p["readout"]["b"]
      acc = (logits.argmax(-1) == shape_j[va]).mean()
      return r_model, r_pixels, acc
    return jax.vmap(one)(params, batch_stats, train_idx, val_idx)

  arrays = (images_j, factors_j, shape_j)
  r_trained, r_pixels, acc = jax.device_get(
      decode_all(state.params, state.batch_stats, *arrays))
  init_state = jax.jit(kernel.init)(jax.random.key(int(config.seed)))
  r_untrained, _, _ = jax.device_get(
      decode_all(init_state.params, init_state.batch_stats, *arrays))
  results = {
      "r": {"trained": np.asarray(r_trained), "untrained": np.asarray(r_untrained),
            "pixels": np.asarray(r_pixels)},
      "factors": sprites_lib.FACTORS, "val_accuracy": np.asarray(acc),
      "history": result.history, "timings": {"train": train_seconds},
      "num_images": int(images.shape[0]),
  }
  if workdir is not None:
    writers.write_json(pathlib.Path(workdir) / "results.json", {
        "r": {k: v.tolist() for k, v in results["r"].items()},
        "factors": list(sprites_lib.FACTORS), "val_accuracy": acc.tolist(),
        "history": result.history, "timings": results["timings"]}, indent=1)
  return results


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None
        ) -> dict[str, Any]:
  """Runs ``config.task`` (``vmf`` or ``sprites``); see :func:`run_vmf`, :func:`run_sprites`."""
  task = str(config.get("task", "vmf"))
  if task == "vmf":
    return run_vmf(config, workdir)
  if task == "sprites":
    return run_sprites(config, workdir)
  raise ValueError(f"config.task must be 'vmf' or 'sprites'; got {task!r}")
