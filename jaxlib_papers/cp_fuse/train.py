"""``run(config, workdir)``: train the model pairs, then decode every protected prompt with
every rule and measure reproduction and utility.

Training is one ``core.train_loop`` run of :func:`kernel.make_lm_kernel` (all ``2 *
num_pairs`` models in one vmapped program). Evaluation, per pair, decodes with one jitted
:func:`kernel.decode` (the rule is data, so one compilation serves every method):

* protected prompts (greedy): each model alone, CP-Delta, CP-Fuse (official grid), CP-Fuse
  (exact solver), MemFree on each model;
* free generations (sampling) from held-out prefixes, checked against the grammar;
* held-out perplexity by teacher forcing under every rule.
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlib_papers.core import train_loop, writers
from jaxlib_papers.cp_fuse import data as data_lib
from jaxlib_papers.cp_fuse import fusion, kernel, metrics, models


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


def benchmark_from_config(config: ml_collections.ConfigDict) -> data_lib.Benchmark:
  d = config.data
  return data_lib.make_benchmark(
      num_corpus_sentences=d.num_corpus_sentences, num_heldout_sentences=d.num_heldout_sentences,
      num_protected=d.num_protected, prefix_len=d.prefix_len,
      continuation_len=d.continuation_len, separation_n=d.separation_n, zipf=d.zipf,
      seed=d.seed)


def model_from_config(config: ml_collections.ConfigDict) -> models.CausalLM:
  m = config.model
  return models.CausalLM(vocab_size=data_lib.VOCAB_SIZE, d_model=m.d_model,
                         num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim,
                         max_len=config.data.prefix_len + config.data.continuation_len)


def make_kernel(config: ml_collections.ConfigDict):
  t = config.train
  total = max(int(config.loop.num_steps), 2)
  warmup = max(1, min(int(t.warmup_steps), total - 1))
  schedule = optax.warmup_cosine_decay_schedule(0.0, t.lr, warmup, total, end_value=0.1 * t.lr)
  optimizer = optax.chain(optax.clip_by_global_norm(t.grad_clip),
                          optax.adamw(schedule, weight_decay=t.weight_decay))
  model = model_from_config(config)
  seq_len = config.data.prefix_len + config.data.continuation_len
  return model, kernel.make_lm_kernel(model, optimizer, num_models=2 * t.num_pairs,
                                      seq_len=seq_len)


def train_models(config: ml_collections.ConfigDict, bench: data_lib.Benchmark,
                 workdir: pathlib.Path | None, mesh: jax.sharding.Mesh | None = None):
  """Trains every model; returns (model, lm kernel, params [M, ...] on host, history)."""
  model, lm = make_kernel(config)
  source = data_lib.training_source(
      bench, batch_size=config.train.batch_size, num_pairs=config.train.num_pairs,
      protect_prob=config.train.protect_prob, seed=config.seed)
  result = train_loop.run(lm, source, config, workdir, mesh=mesh, name="cp_fuse")
  return model, lm, jax.device_get(result.state.params), result.history


def pair_params(params: Any, pair: int) -> Any:
  """The two models of pair ``pair``: leaves [2, ...]."""
  return jax.tree.map(lambda x: x[2 * pair:2 * pair + 2], params)


class Evaluator:
  """Jitted decoding and scoring for one config (compiled once, reused for every pair)."""

  def __init__(self, config: ml_collections.ConfigDict, lm, bench: data_lib.Benchmark):
    self.config = config
    self.bench = bench
    self.grid = fusion.official_grid(config.fusion.grid_size)
    protected = np.concatenate([bench.protected(0), bench.private[1]], axis=0)
    self.ngram_table = jnp.asarray(np.unique(np.concatenate([
        np.lib.stride_tricks.sliding_window_view(row, config.fusion.memfree_n)
        for row in protected]), axis=0), jnp.int32)
    num_new = config.data.continuation_len
    iters = config.fusion.bisection_iterations
    self.decode = jax.jit(lambda p, prompts, key, opts: kernel.decode(
        lm.log_probs, p, prompts, key, opts, num_new=num_new, grid=self.grid,
        ngram_table=self.ngram_table, bisection_iterations=iters))
    self.log_probs = jax.jit(lm.log_probs)
    self.score = jax.jit(lambda lp, targets, opts: kernel.fused_token_log_probs(
        lp, targets, opts, grid=self.grid, bisection_iterations=iters))

  def run_pair(self, params2: Any, pair_seed: int) -> dict[str, Any]:
    """Every measurement for one pair of models (host numpy results)."""
    config, bench = self.config, self.bench
    prompts, continuations, owner = data_lib.prompts(bench)
    table = method_table(config.fusion.cp_delta_coef)
    key = jax.random.key(config.eval.seed + 1000 * pair_seed)
    out: dict[str, Any] = {"decode": {}, "perplexity": {}, "grammatical": {}, "free": {},
                           "sentences": {}}
    for name, (rule, fixed, block) in table.items():
      res = self.decode(params2, jnp.asarray(prompts), key,
                        kernel.options(rule, fixed, 0.0, block))
      out["decode"][name] = jax.tree.map(np.asarray, res._asdict())
    # Held-out perplexity (teacher forcing).
    windows = data_lib.heldout_windows(bench, config.eval.num_heldout, seed=config.eval.seed)
    inputs = jnp.broadcast_to(jnp.asarray(windows[:, :-1])[None], (2, *windows[:, :-1].shape))
    logp = self.log_probs(params2, inputs)
    targets = jnp.asarray(windows[:, 1:])
    for name in UTILITY_METHODS:
      rule, fixed, _ = table[name]
      lp = self.score(logp, targets, kernel.options(rule, fixed))
      out["perplexity"][name] = float(np.exp(-np.mean(np.asarray(lp))))
    # Free generations from held-out prefixes (same shapes as the protected prompts).
    free_windows = data_lib.heldout_windows(bench, prompts.shape[0],
                                            seed=config.eval.seed + 7)
    free_prompts = free_windows[:, :prompts.shape[1]]
    for name in UTILITY_METHODS:
      rule, fixed, _ = table[name]
      gens, ok, counts = [], [], np.zeros(2)
      for s in range(config.eval.free_seeds):
        res = self.decode(params2, jnp.asarray(free_prompts),
                          jax.random.fold_in(key, 17 + s),
                          kernel.options(rule, fixed, config.eval.temperature, False))
        tokens = np.asarray(res.tokens)
        gens.append(tokens)
        ok += [data_lib.is_grammatical(np.concatenate([p[1:], g]))
               for p, g in zip(free_prompts, tokens)]
        for p, g in zip(free_prompts, tokens):
          counts += data_lib.sentence_parse_rate(np.concatenate([p[1:], g]))
      out["free"][name] = np.concatenate(gens)
      out["grammatical"][name] = float(np.mean(ok))
      out["sentences"][name] = float(counts[0] / max(counts[1], 1))
    out["prompts"], out["continuations"], out["owner"] = prompts, continuations, owner
    out["free_prompts"] = free_prompts
    return out


def reproduction_metrics(pair: dict[str, Any], bench: data_lib.Benchmark) -> dict[str, Any]:
  """Token and character LCS of every method's greedy generations (host numpy)."""
  private_text = [[data_lib.detokenize(p) for p in bench.private[i]] for i in range(2)]
  out = {}
  for name, res in pair["decode"].items():
    tokens = res["tokens"]
    lcs_sets = np.stack([metrics.lcs_matrix(tokens, bench.private[i]).max(axis=1)
                         for i in range(2)], axis=1)                      # [G, 2]
    lcs_cont = np.array([metrics.lcs_length(g, c)
                         for g, c in zip(tokens, pair["continuations"])])
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


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None, *,
        mesh: jax.sharding.Mesh | None = None, evaluate: bool = True) -> dict[str, Any]:
  """Trains the pairs and evaluates every rule.

  Returns:
    dict with "bench", "model", "params" ([M, ...]), "history", and per pair ("pairs": a list)
    the raw decodes, perplexities, grammaticality and the LCS metrics ("reproduction").
  """
  workdir = None if workdir is None else pathlib.Path(workdir)
  bench = benchmark_from_config(config)
  model, lm, params, history = train_models(config, bench, workdir, mesh)
  result: dict[str, Any] = {"bench": bench, "model": model, "lm": lm, "params": params,
                            "history": history}
  if not evaluate:
    return result
  evaluator = Evaluator(config, lm, bench)
  pairs = []
  for k in range(config.train.num_pairs):
    pair = evaluator.run_pair(pair_params(params, k), k)
    pair["reproduction"] = reproduction_metrics(pair, bench)
    pairs.append(pair)
  result["pairs"] = pairs
  result["evaluator"] = evaluator
  if workdir is not None and jax.process_index() == 0:
    summary = {
        "perplexity": [p["perplexity"] for p in pairs],
        "grammatical": [p["grammatical"] for p in pairs],
        "lcs_p95": [{name: float(np.percentile(r["lcs_sets"][p["owner"] < 2].max(1), 95))
                     for name, r in p["reproduction"].items()} for p in pairs],
    }
    writers.write_json(workdir / "results.json", summary, indent=1, sort_keys=True)
  return result
