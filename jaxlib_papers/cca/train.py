"""``run(config, workdir)``: pretrain -> align (CCA / DPO / unlearning) -> sample -> evaluate.

Two :mod:`core.stages <jaxlib_papers.core.stages>`: ``pretrain`` (``workdir/pretrain``)
trains ``num_seeds`` class-conditional transformers with condition dropout in one program;
``align`` (``workdir/align``) fine-tunes one copy per (seed, lambda) against its frozen
pretrained reference, again in one program. Each stage resumes from its own checkpoints.
Then every model is sampled (guidance-free, and with CFG at ``eval.cfg_scales``) and scored
by :class:`evaluate.Evaluator`; :func:`run` returns a typed :class:`Result`.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlib_papers.cca import data as data_lib
from jaxlib_papers.cca import evaluate, kernel, models
from jaxlib_papers.cca.configs import default as default_config
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results, stages
from jaxlib_papers.core.contract import TrainKernel

PRETRAIN_GROUPS = ("data", "model", "pretrain", "num_seeds")
ALIGN_GROUPS = ("data", "model", "pretrain", "align", "num_seeds", "pretrain_steps")


class SampleSettings(NamedTuple):
  samples_per_class: int              # n / K samples drawn per digit and setting
  cfg_scales: tuple[float, ...]       # s of the base model's CFG rows
  cca_cfg_scale: float                # s of CFG on top of the main CCA model
  use_cache: bool                     # KV cache (else full-prefix recompute)
  seed: int                           # the sampling PRNG seed


class Settings(NamedTuple):
  """What :func:`run` reads from the config, converted and checked once."""
  seed: int
  num_seeds: int                      # S, runs in one program
  lambdas: tuple[float, ...]          # the lambda sweep, one align run per (seed, lambda)
  main_lambda: float                  # the lambda of the headline CCA row
  label_dropout: float                # pretraining condition dropout
  align: kernel.AlignSettings
  sample: SampleSettings


def settings_from_config(config: ml_collections.ConfigDict) -> Settings:
  """The run's :class:`Settings`; raises a ValueError naming a bad config key."""
  lambdas = tuple(float(x) for x in config.align.lambdas)
  if float(config.align.main_lambda) not in lambdas:
    raise ValueError(f"config.align.main_lambda ({config.align.main_lambda}) must be one of "
                     f"config.align.lambdas {lambdas}")
  if config.num_seeds < 1:
    raise ValueError(f"config.num_seeds must be >= 1, got {config.num_seeds}")
  e = config.eval
  sample = SampleSettings(int(e.samples_per_class), tuple(float(s) for s in e.cfg_scales),
                          float(e.cca_cfg_scale), bool(e.use_cache), int(e.seed))
  return Settings(int(config.seed), int(config.num_seeds), lambdas,
                  float(config.align.main_lambda), float(config.pretrain.label_dropout),
                  align_settings(config), sample)


@dataclasses.dataclass(frozen=True)
class Result:
  """What :func:`run` returns; :func:`results.write` saves the fields not in memory only.

  ``metrics`` {setting: {metric: [S] per seed}}; ``summary`` one row per setting, mean and
  std over seeds (:func:`results.summarize`); ``test_nll`` [S] of the pretrained models.
  """
  metrics: dict[str, dict[str, np.ndarray]]
  summary: list[dict[str, Any]]
  test_nll: np.ndarray
  timing: dict[str, float]
  lambdas: tuple[float, ...]
  main_lambda: float
  classifier_accuracy: float
  align_steps: int
  samples: dict[str, np.ndarray] = results.in_memory()   # {setting: [S, n, L]}
  labels: np.ndarray = results.in_memory()               # [n]
  pretrain_history: list[dict[str, float]] = results.in_memory()
  align_history: list[dict[str, float]] = results.in_memory()
  base_params: Any = results.in_memory()                 # leaves [S, ...]
  aligned_params: Any = results.in_memory()              # leaves [S, Lambda, ...]
  digits: data_lib.Digits | None = results.in_memory()   # the tokenised data (and codebook)


def make_model(config: ml_collections.ConfigDict) -> models.ARTransformer:
  m = config.model
  if m.width % m.heads:
    raise ValueError(f"config.model.width ({m.width}) must be divisible by model.heads "
                     f"({m.heads})")
  d = config.data
  vocab = d.levels if d.tokenizer == "raster" else d.codebook_size
  return models.ARTransformer(vocab_size=vocab, num_classes=data_lib.NUM_CLASSES,
                              length=data_lib.sequence_length(d.tokenizer, d.patch),
                              width=m.width, depth=m.depth, heads=m.heads, mlp=m.mlp)


def load_digits(config: ml_collections.ConfigDict) -> data_lib.Digits:
  """The digits as ``config.data`` tokenises and splits them (:func:`data.load`)."""
  d = config.data
  return data_lib.load(d.levels, d.test_size, d.split_seed, tokenizer=d.tokenizer,
                       codebook_size=d.codebook_size, patch=d.patch,
                       codebook_seed=d.codebook_seed)


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


def align_steps(config, num_train: int) -> int:
  per_epoch = num_train // config.align.batch_size
  return max(1, int(math.ceil(config.align.epochs * per_epoch)))


def stages_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The config the stages fingerprint: ``pretrain_steps`` and float lambdas added.

  The align stage depends on how long its references were pretrained, so a longer
  pretraining does not resume a stale alignment.
  """
  out = ml_collections.ConfigDict(config.to_dict())
  out.pretrain_steps = int(config.loop.num_steps)
  out.align.lambdas = tuple(float(x) for x in config.align.lambdas)
  return out


def _align_kernel(config, settings: Settings, references) -> TrainKernel:
  """The align stage's kernel: run r = seed * Lambda + j from its seed's reference."""
  num_lambdas = len(settings.lambdas)
  run_refs = jax.tree.map(lambda x: np.repeat(np.asarray(x), num_lambdas, axis=0), references)
  run_lambdas = np.tile(np.asarray(settings.lambdas, np.float32), settings.num_seeds)
  return kernel.make_align_kernel(kernel.sequence_logprob(make_model(config)),
                                  align_optimizer(config), settings.align, run_refs,
                                  run_lambdas)


def make_stages(config, settings: Settings, digits: data_lib.Digits,
                pretrain_kernel: TrainKernel) -> tuple[stages.Stage, ...]:
  """``pretrain`` (the seeds in one program) then ``align`` (seeds x lambdas in one program)."""
  seeds = settings.seed * 1000 + np.arange(settings.num_seeds)
  align_seeds = np.repeat(settings.seed * 1000 + 500 + np.arange(settings.num_seeds),
                          len(settings.lambdas))
  source = lambda batch_size, run_seeds: data_lib.epoch_source(
      digits.train_tokens, digits.train_labels, batch_size, run_seeds)
  return (
      stages.Stage("pretrain", lambda _: pretrain_kernel, int(config.loop.num_steps),
                   data=source(config.pretrain.batch_size, seeds), groups=PRETRAIN_GROUPS,
                   carry=lambda state: jax.device_get(state.params)),
      stages.Stage("align", lambda refs: _align_kernel(config, settings, refs),
                   align_steps(config, digits.train_tokens.shape[0]),
                   data=source(config.align.batch_size, align_seeds), groups=ALIGN_GROUPS,
                   carry=lambda state: jax.device_get(state.params),
                   loop=config.align_loop.to_dict()),
  )


def train(config, settings: Settings, digits: data_lib.Digits, workdir=None, mesh=None):
  """Both stages. Returns (base params [S, ...], aligned [S, Lambda, ...], the
  :class:`stages.StagesResult`, test NLL [S] of the pretrained models)."""
  pretrain_kernel = kernel.make_pretrain_kernel(
      make_model(config), pretrain_optimizer(config, int(config.loop.num_steps)),
      num_runs=settings.num_seeds, label_dropout=settings.label_dropout)
  out = stages.run_stages(make_stages(config, settings, digits, pretrain_kernel),
                          stages_config(config), workdir, mesh=mesh, name="cca")
  base = jax.device_get(out.states["pretrain"].params)
  nll = np.asarray(jax.jit(pretrain_kernel.evaluate)(base, jnp.asarray(digits.test_tokens),
                                                     jnp.asarray(digits.test_labels)))
  shape = (settings.num_seeds, len(settings.lambdas))
  aligned = jax.tree.map(lambda x: np.asarray(x).reshape(*shape, *x.shape[1:]), out.carried)
  return base, aligned, out, nll


def make_batched_sampler(config):
  """jit(vmap(sample)) over seeds: (params [S, ...], labels [n], keys [S], scale [])."""
  sampler = kernel.make_sampler(make_model(config), guided=True,
                                use_cache=bool(config.eval.use_cache))
  return jax.jit(jax.vmap(sampler, in_axes=(0, None, 0, None)))


def sample_labels(settings: Settings) -> np.ndarray:
  """[n] int32: every digit ``samples_per_class`` times (0, 1, ..., 9, 0, 1, ...)."""
  return np.tile(np.arange(data_lib.NUM_CLASSES, dtype=np.int32),
                 settings.sample.samples_per_class)


def sample_all(config, settings: Settings, base_params, aligned_params
               ) -> dict[str, np.ndarray]:
  """Samples [S, n, 64] of every evaluated setting, keyed by its name.

  Settings: ``base`` (guidance-free), ``cfg s=...`` (base with CFG), ``cca lambda=...``
  (each aligned model, guidance-free) and ``cca+cfg s=...`` (the main lambda with CFG).
  Guidance-free rows use the guided program at s = 0 (the mixed logits are then exactly
  l_c), so one compiled sampler serves every row.
  """
  sample = make_batched_sampler(config)
  s = settings.sample
  labels = jnp.asarray(sample_labels(settings))
  key = jax.random.key(s.seed)
  rows = [("base", base_params, 0.0)]
  rows += [(f"cfg s={scale:g}", base_params, scale) for scale in s.cfg_scales]
  for j, lam in enumerate(settings.lambdas):
    rows.append((f"cca lambda={lam:g}",
                 jax.tree.map(lambda x, j=j: x[:, j], aligned_params), 0.0))
  main = jax.tree.map(lambda x: x[:, settings.lambdas.index(settings.main_lambda)],
                      aligned_params)
  rows.append((f"cca+cfg s={s.cca_cfg_scale:g}", main, s.cca_cfg_scale))
  out = {}
  for i, (name, params, scale) in enumerate(rows):
    keys = jax.random.split(jax.random.fold_in(key, i), settings.num_seeds)
    out[name] = np.asarray(sample(params, labels, keys, scale))
  return out


def score(evaluator: evaluate.Evaluator, samples: dict[str, np.ndarray], labels: np.ndarray
          ) -> dict[str, dict[str, np.ndarray]]:
  """{setting: {metric: [S]}}: every seed's samples scored by ``evaluator``."""
  metrics = {}
  for name, per_seed in samples.items():
    rows = [evaluator(tokens, labels) for tokens in per_seed]
    metrics[name] = {k: np.array([r[k] for r in rows]) for k in rows[0]}
  return metrics


def summarize(metrics: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
  """One row per setting: each metric's mean and std over seeds."""
  rows = [{"setting": name, **{k: v[i] for k, v in m.items()}}
          for name, m in metrics.items() for i in range(len(next(iter(m.values()))))]
  keys = list(next(iter(metrics.values())))
  return results.summarize(rows, keys, by=("setting",), count="seeds")


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        mesh: jax.sharding.Mesh | None = None, evaluator: evaluate.Evaluator | None = None
        ) -> Result:
  """Pretrains, aligns, samples and evaluates (see the module docstring).

  Returns:
    A :class:`Result`, also written to ``workdir/results.json`` (without its in-memory
    fields) when ``workdir`` is given.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  settings = settings_from_config(config)
  workdir = None if workdir is None else pathlib.Path(workdir)
  cpu_start = time.process_time()
  digits = load_digits(config)
  base_params, aligned_params, trained, test_nll = train(config, settings, digits, workdir,
                                                         mesh)
  timing = {"pretrain": trained.seconds["pretrain"], "align": trained.seconds["align"]}
  t0 = time.perf_counter()
  samples = sample_all(config, settings, base_params, aligned_params)
  timing["sample"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  evaluator = evaluator or evaluate.Evaluator(digits)
  labels = sample_labels(settings)
  metrics = score(evaluator, samples, labels)
  timing["evaluate"] = time.perf_counter() - t0
  timing["cpu_total"] = time.process_time() - cpu_start   # CPU seconds, all threads
  result = Result(
      metrics=metrics, summary=summarize(metrics), test_nll=test_nll, timing=timing,
      lambdas=settings.lambdas, main_lambda=settings.main_lambda,
      classifier_accuracy=evaluator.svc_test_accuracy,
      align_steps=align_steps(config, digits.train_tokens.shape[0]), samples=samples,
      labels=labels, pretrain_history=trained.histories["pretrain"],
      align_history=trained.histories["align"], base_params=base_params,
      aligned_params=aligned_params, digits=digits)
  if jax.process_index() == 0:
    results.write(result, workdir)
  return result


def summary_table(result: Result) -> str:
  """A markdown table: mean ± std over seeds of every metric of every setting."""
  keys = [k for k in result.summary[0] if k not in ("setting", "seeds") and
          not k.endswith("_std")]
  lines = ["| setting | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
  for row in result.summary:
    lines.append(f"| {row['setting']} | " + " | ".join(
        f"{row[k]:.3g} ± {row[k + '_std']:.2g}" for k in keys) + " |")
  return "\n".join(lines)
