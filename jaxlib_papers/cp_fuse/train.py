"""``run(config, workdir)``: train the model pairs, then decode every protected prompt with
every rule and measure reproduction and utility.

The config becomes :class:`Settings` once (:func:`settings_from_config`). Training is one
``core.stages`` stage of :func:`kernel.make_lm_kernel` (all ``2 * num_pairs`` models in one
vmapped program). Evaluation, per pair, decodes with one jitted
:func:`kernel.decode_cached` (:func:`kernel.decode` with both models run one position per
step on a key-value cache; the rule is data, so one compilation serves every method):

* protected prompts (greedy): each model alone, CP-Delta, CP-Fuse (official grid), CP-Fuse
  (exact solver), MemFree on each model;
* free generations (sampling) from held-out prefixes, checked against the grammar;
* held-out perplexity by teacher forcing under every rule.

``run`` returns a :class:`Result` (``results.json``: the per-pair perplexities,
parse rates and 95th-percentile LCS; trained parameters and raw decodes stay in memory).
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

from jaxlib_papers.core import blocks, contract, results, stages
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core.contract import TrainKernel
from jaxlib_papers.cp_fuse import data as data_lib
from jaxlib_papers.cp_fuse import fusion, kernel, metrics, models
from jaxlib_papers.cp_fuse.configs import default as default_config


class BenchmarkSettings(NamedTuple):
  """The keyword arguments of :func:`data_lib.make_benchmark` (config group ``data``)."""
  num_corpus_sentences: int
  num_heldout_sentences: int
  num_protected: int
  prefix_len: int
  continuation_len: int
  separation_n: int
  zipf: float
  seed: int


class TrainSettings(NamedTuple):
  """Config group ``train`` and the optimiser-step count (``loop.num_steps``)."""
  num_pairs: int
  batch_size: int
  protect_prob: float
  lr: float
  warmup_steps: int
  weight_decay: float
  grad_clip: float
  steps_per_call: int
  num_steps: int


class FusionSettings(NamedTuple):
  """Config group ``fusion``."""
  grid_size: int
  bisection_iterations: int
  cp_delta_coef: float
  memfree_n: int


class EvalSettings(NamedTuple):
  """Config group ``eval``."""
  num_heldout: int
  free_seeds: int
  temperature: float
  infringement_tokens: int
  infringement_chars: int
  seed: int


class Settings(NamedTuple):
  seed: int
  benchmark: BenchmarkSettings
  model: models.CausalLM
  train: TrainSettings
  fusion: FusionSettings
  eval: EvalSettings

  @property
  def seq_len(self) -> int:
    """T, the model's input length (a protected passage: prefix and continuation)."""
    return self.benchmark.prefix_len + self.benchmark.continuation_len


def settings_from_config(config: ml_collections.ConfigDict) -> Settings:
  """The config's groups as :class:`Settings` (read once; nothing else reads the config)."""
  bench = BenchmarkSettings(**config.data.to_dict())
  m = config.model
  model = models.CausalLM(vocab_size=data_lib.VOCAB_SIZE, d_model=m.d_model,
                          num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim,
                          max_len=bench.prefix_len + bench.continuation_len)
  return Settings(int(config.seed), bench, model,
                  TrainSettings(**config.train.to_dict(), num_steps=int(config.loop.num_steps)),
                  FusionSettings(**config.fusion.to_dict()), EvalSettings(**config.eval.to_dict()))


# name -> (rule, fixed (alpha, beta), block n-grams)
def method_table(cp_delta_coef: float) -> dict[str, tuple[int, tuple[float, float], bool]]:
  """The decoding methods compared (greedy on protected prompts)."""
  return {
      "model_1": (kernel.RULE_FIXED, (1.0, 0.0), False),
      "model_2": (kernel.RULE_FIXED, (0.0, 1.0), False),
      "cp_delta": (kernel.RULE_FIXED, (cp_delta_coef, 1.0 - cp_delta_coef), False),
      "cp_fuse": (kernel.RULE_GRID, (0.0, 0.0), False),
      "cp_fuse_exact": (kernel.RULE_EXACT, (0.0, 0.0), False),
      "memfree_1": (kernel.RULE_FIXED, (1.0, 0.0), True),
      "memfree_2": (kernel.RULE_FIXED, (0.0, 1.0), True),
  }


UTILITY_METHODS = ("model_1", "model_2", "cp_delta", "cp_fuse", "cp_fuse_exact")


def make_benchmark(settings: Settings) -> data_lib.Benchmark:
  return data_lib.make_benchmark(**settings.benchmark._asdict())


def optimizer(train: TrainSettings) -> optax.GradientTransformation:
  """Clipped AdamW with linear warmup and cosine decay to a tenth over ``num_steps``."""
  total = max(int(train.num_steps), 2)
  warmup = max(1, min(int(train.warmup_steps), total - 1))
  schedule = optax.warmup_cosine_decay_schedule(0.0, train.lr, warmup, total,
                                                end_value=0.1 * train.lr)
  return optax.chain(optax.clip_by_global_norm(train.grad_clip),
                     optax.adamw(schedule, weight_decay=train.weight_decay))


def lm_kernel(settings: Settings) -> TrainKernel:
  """The kernel training all ``2 * num_pairs`` models."""
  return kernel.make_lm_kernel(settings.model, optimizer(settings.train),
                               num_models=2 * settings.train.num_pairs,
                               seq_len=settings.seq_len)


def steps_per_call(lm: TrainKernel, source: Callable[[int], np.ndarray], k: int
                   ) -> tuple[TrainKernel, Callable[[int], np.ndarray]]:
  """``k`` optimiser steps per call: the step scanned, call c's batch the steps' batches.

  The batches ``[B, M, T + 1]`` of steps ``c k .. c k + k - 1`` are stacked on axis 1
  (``[B, k, M, T + 1]``), so the sharded leading batch axis stays in place.
  """
  if int(k) == 1:
    return lm, source
  step = blocks.scan_steps(lm.train_step, int(k), batch_axis=1)
  return (contract.train_kernel(lm.init, step, **lm.extras),
          lambda call: np.stack([source(call * k + i) for i in range(k)], axis=1))


def training_stages(settings: Settings, lm: TrainKernel,
                    bench: data_lib.Benchmark) -> tuple[stages.Stage, ...]:
  """One stage: every model trained for ``num_steps`` optimiser steps."""
  t = settings.train
  source = data_lib.training_source(bench, batch_size=t.batch_size, num_pairs=t.num_pairs,
                                    protect_prob=t.protect_prob, seed=settings.seed)
  scanned, data = steps_per_call(lm, source, t.steps_per_call)
  return (stages.Stage("lm", lambda _: scanned, num_steps=int(t.num_steps),
                       steps_per_call=int(t.steps_per_call), data=data,
                       groups=("data", "model", "train")),)


def pair_params(params: Any, pair: int) -> Any:
  """The two models of pair ``pair``: leaves [2, ...]."""
  return jax.tree.map(lambda x: x[2 * pair:2 * pair + 2], params)


@dataclasses.dataclass(frozen=True)
class PairResult:
  """Every measurement of one pair of models (host numpy; method names as keys)."""
  decode: dict[str, dict[str, np.ndarray]]   # greedy protected decodes (DecodeOutput fields)
  perplexity: dict[str, float]               # held-out perplexity (teacher forcing)
  grammatical: dict[str, float]              # share of free generations that parse
  sentences: dict[str, float]                # share of their sentences that parse
  free: dict[str, np.ndarray]                # [seeds * G, N] sampled free generations
  prompts: np.ndarray                        # [G, P] protected prompts
  continuations: np.ndarray                  # [G, N] their true continuations
  owner: np.ndarray                          # [G] 0 / 1: corpus of the passage, 2: shared
  free_prompts: np.ndarray                   # [G, P] held-out prefixes
  reproduction: dict[str, dict[str, np.ndarray]]  # LCS metrics (:func:`reproduction_metrics`)


class Evaluator:
  """Jitted decoding and scoring for one setting (compiled once, reused for every pair)."""

  def __init__(self, settings: Settings, lm: TrainKernel, bench: data_lib.Benchmark):
    self.settings = settings
    self.bench = bench
    self.grid = fusion.official_grid(settings.fusion.grid_size)
    protected = np.concatenate([bench.protected(0), bench.private[1]], axis=0)
    self.ngram_table = jnp.asarray(np.unique(np.concatenate([
        np.lib.stride_tricks.sliding_window_view(row, settings.fusion.memfree_n)
        for row in protected]), axis=0), jnp.int32)
    iters = settings.fusion.bisection_iterations
    decode_settings = kernel.DecodeSettings(settings.benchmark.continuation_len, self.grid,
                                            self.ngram_table, iters)
    # One model position per step on a key-value cache (kernel.decode_cached): the same
    # decode as kernel.decode's whole-buffer recompute, at ~1/(P + N) of its model FLOPs.
    def decode(p, prompts, key, opts):
      cache = jax.tree.map(lambda x: x[:2], lm.init_cache(prompts.shape[0]))  # the pair's
      return kernel.decode_cached(lm.step_log_probs, cache, p, prompts, key, opts,
                                  decode_settings)
    self.decode = jax.jit(decode)
    self.log_probs = jax.jit(lm.log_probs)
    self.score = jax.jit(lambda lp, targets, opts: kernel.fused_token_log_probs(
        lp, targets, opts, grid=self.grid, bisection_iterations=iters))
    self.table = method_table(settings.fusion.cp_delta_coef)

  def protected_decodes(self, params2: Any, prompts: np.ndarray,
                        key: jax.Array) -> dict[str, dict[str, np.ndarray]]:
    """Every method's greedy decode of ``prompts`` [G, P] (DecodeOutput fields)."""
    out = {}
    for name, (rule, fixed, block) in self.table.items():
      res = self.decode(params2, jnp.asarray(prompts), key,
                        kernel.options(rule, fixed, 0.0, block))
      out[name] = jax.tree.map(np.asarray, res._asdict())
    return out

  def perplexities(self, params2: Any) -> dict[str, float]:
    """Held-out perplexity of every utility method (teacher forcing)."""
    ev = self.settings.eval
    windows = data_lib.heldout_windows(self.bench, ev.num_heldout, seed=ev.seed)
    inputs = jnp.broadcast_to(jnp.asarray(windows[:, :-1])[None], (2, *windows[:, :-1].shape))
    logp = self.log_probs(params2, inputs)
    targets = jnp.asarray(windows[:, 1:])
    out = {}
    for name in UTILITY_METHODS:
      rule, fixed, _ = self.table[name]
      lp = self.score(logp, targets, kernel.options(rule, fixed))
      out[name] = float(np.exp(-np.mean(np.asarray(lp))))
    return out

  def free_generations(self, params2: Any, free_prompts: np.ndarray, key: jax.Array
                       ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, float]]:
    """Sampled generations of every utility method: (tokens, parse rate, sentence rate)."""
    ev = self.settings.eval
    free, grammatical, sentences = {}, {}, {}
    for name in UTILITY_METHODS:
      rule, fixed, _ = self.table[name]
      gens, ok, counts = [], [], np.zeros(2)
      for s in range(ev.free_seeds):
        res = self.decode(params2, jnp.asarray(free_prompts), jax.random.fold_in(key, 17 + s),
                          kernel.options(rule, fixed, ev.temperature, False))
        tokens = np.asarray(res.tokens)
        gens.append(tokens)
        ok += [data_lib.is_grammatical(np.concatenate([p[1:], g]))
               for p, g in zip(free_prompts, tokens)]
        for p, g in zip(free_prompts, tokens):
          counts += data_lib.sentence_parse_rate(np.concatenate([p[1:], g]))
      free[name] = np.concatenate(gens)
      grammatical[name] = float(np.mean(ok))
      sentences[name] = float(counts[0] / max(counts[1], 1))
    return free, grammatical, sentences

  def run_pair(self, params2: Any, pair_seed: int) -> PairResult:
    """Every measurement for one pair of models (host numpy results)."""
    ev = self.settings.eval
    prompts, continuations, owner = data_lib.prompts(self.bench)
    key = jax.random.key(ev.seed + 1000 * pair_seed)
    decodes = self.protected_decodes(params2, prompts, key)
    perplexity = self.perplexities(params2)
    # Free generations from held-out prefixes (same shapes as the protected prompts).
    free_windows = data_lib.heldout_windows(self.bench, prompts.shape[0], seed=ev.seed + 7)
    free_prompts = free_windows[:, :prompts.shape[1]]
    free, grammatical, sentences = self.free_generations(params2, free_prompts, key)
    return PairResult(decodes, perplexity, grammatical, sentences, free, prompts,
                      continuations, owner, free_prompts,
                      reproduction_metrics(decodes, continuations, self.bench))


def reproduction_metrics(decodes: dict[str, dict[str, np.ndarray]], continuations: np.ndarray,
                         bench: data_lib.Benchmark) -> dict[str, dict[str, np.ndarray]]:
  """Token and character LCS of every method's greedy generations (host numpy)."""
  private_text = [[data_lib.detokenize(p) for p in bench.private[i]] for i in range(2)]
  out = {}
  for name, res in decodes.items():
    tokens = res["tokens"]
    lcs_sets = np.stack([metrics.lcs_matrix(tokens, bench.private[i]).max(axis=1)
                         for i in range(2)], axis=1)                      # [G, 2]
    lcs_cont = np.array([metrics.lcs_length(g, c) for g, c in zip(tokens, continuations)])
    lcs_shared = metrics.lcs_matrix(tokens, bench.shared[None])[:, 0]
    texts = [data_lib.detokenize(g) for g in tokens]
    chars = np.stack([metrics.char_lcs_matrix(texts, private_text[i]).max(axis=1)
                      for i in range(2)], axis=1)                         # [G, 2]
    out[name] = dict(lcs_sets=lcs_sets, lcs_cont=lcs_cont, lcs_shared=lcs_shared,
                     chars=chars)
  return out


def own_model_view(rep: dict[str, Any], owner: np.ndarray, base: str) -> dict[str, Any]:
  """Per prompt, the ``base``_1 or ``base``_2 generation of the model that holds it."""
  first, second = rep[f"{base}_1"], rep[f"{base}_2"]
  pick = (owner == 1)
  return {k: np.where(pick.reshape((-1,) + (1,) * (first[k].ndim - 1)), second[k], first[k])
          for k in first}


def lcs_p95(pair: PairResult) -> dict[str, float]:
  """Per method, the 95th percentile of the LCS with the private protected sets."""
  private = pair.owner < 2
  return {name: float(np.percentile(r["lcs_sets"][private].max(1), 95))
          for name, r in pair.reproduction.items()}


@dataclasses.dataclass(frozen=True)
class Result:
  """What :func:`run` returns; ``results.json`` holds the first three fields (per pair)."""
  perplexity: list[dict[str, float]]      # per pair: held-out perplexity per method
  grammatical: list[dict[str, float]]     # per pair: free-generation parse rate per method
  lcs_p95: list[dict[str, float]]         # per pair: 95th-percentile LCS per method
  settings: Settings = results.in_memory()
  bench: data_lib.Benchmark = results.in_memory()
  lm: TrainKernel = results.in_memory()
  params: Any = results.in_memory()       # leaves [M, ...] on host
  history: list[dict[str, float]] = results.in_memory()  # the training loop's rows
  pairs: list[PairResult] = results.in_memory()
  evaluator: Evaluator | None = results.in_memory()


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        mesh: jax.sharding.Mesh | None = None, evaluate: bool = True) -> Result:
  """Trains the pairs and evaluates every rule (``evaluate=False``: training only).

  Training resumes from ``workdir/lm``; ``workdir/results.json`` is written after the
  evaluation.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  settings = settings_from_config(config)
  bench = make_benchmark(settings)
  lm = lm_kernel(settings)
  trained = stages.run_stages(training_stages(settings, lm, bench), config, workdir,
                              mesh=mesh, name="cp_fuse")
  # A stage of 0 steps is skipped: the models stay at their initialisation.
  state = trained.carried if "lm" in trained.states else jax.jit(lm.init)(
      jax.random.key(settings.seed))
  params = jax.device_get(state.params)
  base = dict(settings=settings, bench=bench, lm=lm, params=params,
              history=trained.histories.get("lm", []))
  if not evaluate:
    return Result([], [], [], **base, pairs=[])
  evaluator = Evaluator(settings, lm, bench)
  pairs = [evaluator.run_pair(pair_params(params, k), k)
           for k in range(settings.train.num_pairs)]
  result = Result([p.perplexity for p in pairs], [p.grammatical for p in pairs],
                  [lcs_p95(p) for p in pairs], **base, pairs=pairs, evaluator=evaluator)
  if jax.process_index() == 0:
    results.write(result, workdir)
  return result
