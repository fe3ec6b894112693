"""``run(config, workdir)``: pretrain -> align (CCA / DPO / unlearning) -> sample -> evaluate.

Stage 1 (``workdir/pretrain``) trains ``num_seeds`` class-conditional transformers with
condition dropout in one program; stage 2 (``workdir/align``) fine-tunes one copy per
(seed, lambda) against its frozen pretrained reference, again in one program. Each stage
resumes from its own checkpoints. Then every model is sampled (guidance-free, and with CFG
at ``eval.cfg_scales``) and scored by :class:`evaluate.Evaluator`.
"""

from __future__ import annotations

import math
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlib_papers.cca import data as data_lib
from jaxlib_papers.cca import evaluate, kernel, models
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import train_loop, writers


def make_model(config: ml_collections.ConfigDict) -> models.ARTransformer:
  m = config.model
  if m.width % m.heads:
    raise ValueError(f"config.model.width ({m.width}) must be divisible by model.heads "
                     f"({m.heads})")
  return models.ARTransformer(vocab_size=config.data.levels, num_classes=data_lib.NUM_CLASSES,
                              length=data_lib.LENGTH, width=m.width, depth=m.depth,
                              heads=m.heads, mlp=m.mlp)


def _stage_config(config, stage: str, loop: dict[str, Any], groups: tuple[str, ...]):
  return config_lib.stage_config(config, stage, groups=groups, loop=loop,
                                 num_seeds=config.num_seeds)


def pretrain_optimizer(config, total_steps: int) -> optax.GradientTransformation:
  p = config.pretrain
  warmup = max(1, min(int(p.warmup_steps), total_steps - 1)) if total_steps > 1 else 1
  schedule = optax.warmup_cosine_decay_schedule(0.0, p.lr, warmup, max(total_steps, warmup + 1),
                                                end_value=0.05 * p.lr)
  return optax.chain(optax.clip_by_global_norm(p.grad_clip),
                     optax.adamw(schedule, weight_decay=p.weight_decay))


def align_optimizer(config) -> optax.GradientTransformation:
  a = config.align
  return optax.chain(optax.clip_by_global_norm(a.grad_clip),
                     optax.adamw(a.lr, b1=0.9, b2=0.95, weight_decay=a.weight_decay))


def align_settings(config) -> kernel.AlignSettings:
  a = config.align
  return kernel.check_settings(kernel.AlignSettings(
      loss=a.loss, beta=float(a.beta), uncond_ratio=float(a.uncond_ratio),
      negatives=a.negatives, null_label=data_lib.NUM_CLASSES))


def pretrain(config, digits: data_lib.Digits, workdir=None, mesh=None):
  """Stage 1: returns (params with a leading seed axis [S, ...], history, test NLL [S])."""
  model = make_model(config)
  seeds = config.seed * 1000 + np.arange(config.num_seeds)
  source = data_lib.epoch_source(digits.train_tokens, digits.train_labels,
                                 config.pretrain.batch_size, seeds)
  tk = kernel.make_pretrain_kernel(
      model, pretrain_optimizer(config, int(config.loop.num_steps)),
      num_runs=config.num_seeds, label_dropout=config.pretrain.label_dropout)
  stage = _stage_config(config, "pretrain", config.loop.to_dict(),
                        ("data", "model", "pretrain"))
  result = train_loop.run(tk, source, stage, None if workdir is None else workdir / "pretrain",
                          mesh=mesh, name="cca/pretrain")
  params = jax.device_get(result.state.params)
  nll = np.asarray(jax.jit(tk.evaluate)(params, jnp.asarray(digits.test_tokens),
                                        jnp.asarray(digits.test_labels)))
  return params, result.history, nll


def align_steps(config, num_train: int) -> int:
  per_epoch = num_train // config.align.batch_size
  return max(1, int(math.ceil(config.align.epochs * per_epoch)))


def align(config, digits: data_lib.Digits, references, workdir=None, mesh=None,
          lambdas=None):
  """Stage 2: one run per (seed, lambda). Returns params [S, Lambda, ...] and the history."""
  lambdas = np.asarray(config.align.lambdas if lambdas is None else lambdas, np.float32)
  num_seeds, num_lambdas = config.num_seeds, lambdas.shape[0]
  # Run r = seed * num_lambdas + j: the seeds' references repeated over the lambdas.
  run_refs = jax.tree.map(lambda x: np.repeat(np.asarray(x), num_lambdas, axis=0), references)
  run_lambdas = np.tile(lambdas, num_seeds)
  run_seeds = np.repeat(config.seed * 1000 + 500 + np.arange(num_seeds), num_lambdas)
  model = make_model(config)
  tk = kernel.make_align_kernel(kernel.sequence_logprob(model), align_optimizer(config),
                                align_settings(config), run_refs, run_lambdas)
  source = data_lib.epoch_source(digits.train_tokens, digits.train_labels,
                                 config.align.batch_size, run_seeds)
  steps = align_steps(config, digits.train_tokens.shape[0])
  loop = dict(config.align_loop.to_dict(), num_steps=steps)
  stage = _stage_config(config, "align", loop, ("data", "model", "pretrain", "align"))
  stage.pretrain_steps = int(config.loop.num_steps)
  stage.align.lambdas = tuple(float(x) for x in lambdas)
  result = train_loop.run(tk, source, stage, None if workdir is None else workdir / "align",
                          mesh=mesh, name="cca/align")
  params = jax.tree.map(lambda x: np.asarray(x).reshape(num_seeds, num_lambdas, *x.shape[1:]),
                        jax.device_get(result.state.params))
  return params, result.history


def make_batched_sampler(config):
  """jit(vmap(sample)) over seeds: (params [S, ...], labels [n], keys [S], scale [])."""
  sampler = kernel.make_sampler(make_model(config), guided=True,
                                use_cache=bool(config.eval.use_cache))
  return jax.jit(jax.vmap(sampler, in_axes=(0, None, 0, None)))


def sample_all(config, base_params, aligned_params, lambdas, main_index: int
               ) -> dict[str, np.ndarray]:
  """Samples [S, n, 64] of every evaluated setting, keyed by its name.

  Settings: ``base`` (guidance-free), ``cfg s=...`` (base with CFG), ``cca lambda=...``
  (each aligned model, guidance-free) and ``cca+cfg s=...`` (the main lambda with CFG).
  Guidance-free rows use the guided program at s = 0 (the mixed logits are then exactly
  l_c), so one compiled sampler serves every row.
  """
  sample = make_batched_sampler(config)
  n_per = int(config.eval.samples_per_class)
  labels = jnp.asarray(np.tile(np.arange(data_lib.NUM_CLASSES), n_per), jnp.int32)
  key = jax.random.key(config.eval.seed)
  settings = [("base", base_params, 0.0)]
  settings += [(f"cfg s={s:g}", base_params, float(s)) for s in config.eval.cfg_scales]
  for j, lam in enumerate(lambdas):
    settings.append((f"cca lambda={lam:g}",
                     jax.tree.map(lambda x, j=j: x[:, j], aligned_params), 0.0))
  main = jax.tree.map(lambda x: x[:, main_index], aligned_params)
  settings.append((f"cca+cfg s={config.eval.cca_cfg_scale:g}", main,
                   float(config.eval.cca_cfg_scale)))
  out = {}
  for i, (name, params, scale) in enumerate(settings):
    keys = jax.random.split(jax.random.fold_in(key, i), config.num_seeds)
    out[name] = np.asarray(sample(params, labels, keys, scale))
  out["labels"] = np.asarray(labels)
  return out


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        mesh: jax.sharding.Mesh | None = None, evaluator: evaluate.Evaluator | None = None
        ) -> dict[str, Any]:
  """Pretrains, aligns, samples and evaluates (see the module docstring).

  Returns:
    dict with "metrics" {setting: {metric: [S] per seed}}, "samples" {setting: [S, n, 64]},
    "labels" [n], "lambdas", "main_lambda", "pretrain_history", "align_history",
    "base_params", "aligned_params", "test_nll" [S], "timing" (seconds per stage).
  """
  lambdas = tuple(float(x) for x in config.align.lambdas)
  if float(config.align.main_lambda) not in lambdas:
    raise ValueError(f"config.align.main_lambda ({config.align.main_lambda}) must be one of "
                     f"config.align.lambdas {lambdas}")
  if config.num_seeds < 1:
    raise ValueError(f"config.num_seeds must be >= 1, got {config.num_seeds}")
  workdir = None if workdir is None else pathlib.Path(workdir)
  timing = {}
  cpu_start = time.process_time()
  digits = data_lib.load(config.data.levels, config.data.test_size, config.data.split_seed)
  t0 = time.perf_counter()
  base_params, pre_history, test_nll = pretrain(config, digits, workdir, mesh)
  timing["pretrain"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  aligned_params, align_history = align(config, digits, base_params, workdir, mesh)
  timing["align"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  samples = sample_all(config, base_params, aligned_params, lambdas,
                       lambdas.index(float(config.align.main_lambda)))
  timing["sample"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  evaluator = evaluator or evaluate.Evaluator(digits)
  labels = samples.pop("labels")
  metrics = {}
  for name, per_seed in samples.items():
    rows = [evaluator(tokens, labels) for tokens in per_seed]
    metrics[name] = {k: np.array([r[k] for r in rows]) for k in rows[0]}
  timing["evaluate"] = time.perf_counter() - t0
  timing["cpu_total"] = time.process_time() - cpu_start   # CPU seconds, all threads
  result = dict(metrics=metrics, samples=samples, labels=labels, lambdas=lambdas,
                main_lambda=float(config.align.main_lambda), pretrain_history=pre_history,
                align_history=align_history, base_params=base_params,
                aligned_params=aligned_params, test_nll=test_nll, timing=timing,
                classifier_accuracy=evaluator.svc_test_accuracy,
                align_steps=align_steps(config, digits.train_tokens.shape[0]))
  if workdir is not None and jax.process_index() == 0:
    summary = {name: {k: v.tolist() for k, v in m.items()} for name, m in metrics.items()}
    writers.write_json(workdir / "results.json", {"metrics": summary, "test_nll":
                                                   test_nll.tolist(), "timing": timing},
                       indent=1, sort_keys=True, default=str)
  return result


def summary_table(result: dict[str, Any]) -> str:
  """A markdown table: mean ± std over seeds of every metric of every setting."""
  names = list(result["metrics"])
  keys = list(result["metrics"][names[0]])
  lines = ["| setting | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
  for name in names:
    m = result["metrics"][name]
    lines.append(f"| {name} | " + " | ".join(
        f"{np.mean(m[k]):.3g} ± {np.std(m[k]):.2g}" for k in keys) + " |")
  return "\n".join(lines)
