"""Pure kernels: training M language models in one program, and fused decoding as one scan.

* :func:`next_token_loss`: the causal-LM objective of one model.
* :func:`make_lm_kernel`: a ``core.contract.TrainKernel`` whose state holds ``M = 2 *
  num_pairs`` models stacked on a leading member axis; one ``train_step`` runs
  ``core.blocks.gradient_step`` on every model (``core.blocks.vmap_members``, model m
  training on ``batch[:, m]``).
* :func:`decode`: one ``lax.scan`` over the new tokens for a pair of models. The rule is
  data, not a Python branch, so every method shares one compiled program: ``RULE_FIXED``
  (the single models with weights (1, 0) / (0, 1), CP-Delta with (c, 1 - c)),
  ``RULE_GRID`` (the official CP-Fuse grid) or ``RULE_EXACT`` (the exact bisection
  solver); greedy (temperature 0) or sampling; an optional MemFree-style n-gram blocker
  (the blocked tokens are masked after fusing). Models may rule tokens out (-inf
  log-probabilities, e.g. top-k): those are never picked (:func:`fusion.fused_logits`).
  Each step recomputes both models on the whole buffer.
* :func:`decode_cached`: the same decode with both models run on the newest token alone,
  the earlier positions' attention keys and values kept in a cache (the kernel's
  ``init_cache`` / ``step_log_probs``); what the evaluation uses.
* :func:`fused_token_log_probs`: teacher forcing for held-out perplexity under any rule.

No jit here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxlib_papers.core import blocks, contract, prng
from jaxlib_papers.cp_fuse import fusion, models

Array = jax.Array
PyTree = Any

RULE_FIXED, RULE_GRID, RULE_EXACT = 0, 1, 2


def next_token_loss(model: nn.Module, params: PyTree, tokens: Array) -> Array:
  """Mean next-token cross-entropy of one causal LM.

  Args:
    model: ``model.apply({"params": p}, tokens [B, T]) -> logits [B, T, V]``.
    params: the model's parameters.
    tokens: [B, T + 1] int32; positions 0..T-1 predict 1..T.

  Returns:
    [] float32.
  """
  logits = model.apply({"params": params}, tokens[:, :-1])
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]))


class TrainState(NamedTuple):
  step: Array        # [] int32
  params: PyTree     # leaves [M, ...] float32: the M models' parameters
  opt_state: PyTree  # leaves [M, ...]: their optimiser states


class MemberState(NamedTuple):
  """One model's part of :class:`TrainState` (the member axis of ``vmap_members``)."""
  params: PyTree
  opt_state: PyTree


def _member_step(update: Callable[..., blocks.Update], member: MemberState,
                 tokens: Array) -> tuple[MemberState, dict[str, Array]]:
  new = update(member.params, member.opt_state, tokens)
  return MemberState(new.params, new.opt_state), {"loss": new.loss}


def make_lm_kernel(model: nn.Module, optimizer: optax.GradientTransformation, *,
                   num_models: int, seq_len: int) -> contract.TrainKernel:
  """M causal LMs trained side by side (one vmapped step).

  Args:
    model: ``model.apply({"params": p}, tokens [B, T]) -> logits [B, T, V]`` (a
      :class:`models.CausalLM` for the decoding extras ``init_cache``, ``step_log_probs``).
    optimizer: applied to each model separately (vmapped).
    num_models: M.
    seq_len: T, the input length (a batch row holds T + 1 tokens).

  Returns:
    TrainKernel with ``train_step(state, batch [B, M, T + 1] int32)`` (metrics: ``loss``,
    the mean next-token cross-entropy over the models, and ``loss_max``) and the extras
    ``log_probs(params [M, ...], tokens [M, B, T]) -> [M, B, T, V]``,
    ``init_cache(B) -> cache`` (the empty decoding cache, leaves [M, B, ...]) and
    ``step_log_probs(params [M, ...], cache, tokens [M, B]) -> ([M, B, V], cache)``: the
    next-token log-probabilities after one more token per row, the earlier ones read from
    the cache (what ``log_probs`` gives at that position, computed for it alone).
  """
  if num_models <= 0 or seq_len <= 0:
    raise ValueError(f"num_models and seq_len must be positive; got {num_models}, {seq_len}")
  dummy = jnp.zeros((1, seq_len), jnp.int32)

  def init_member(key):
    params = model.init(key, dummy)["params"]
    return MemberState(params, optimizer.init(params))

  init_members = blocks.vmap_init(init_member, num_models)
  update = blocks.gradient_step(functools.partial(next_token_loss, model), optimizer)
  members_step = blocks.vmap_members(functools.partial(_member_step, update), batch_axis=1,
                                     rules={"loss": ("mean", "max")})

  def init(key):
    members = init_members(key)
    return TrainState(jnp.zeros((), jnp.int32), members.params, members.opt_state)

  def train_step(state, batch):
    chex.assert_rank(batch, 3)
    chex.assert_type(batch, jnp.int32)
    if batch.shape[1] != num_models or batch.shape[2] != seq_len + 1:
      raise ValueError(f"batch must be [B, {num_models}, {seq_len + 1}]; got {batch.shape}")
    members, metrics = members_step(MemberState(state.params, state.opt_state), batch)
    return TrainState(state.step + 1, members.params, members.opt_state), metrics

  def log_probs(params, tokens):
    return jax.vmap(lambda p, t: jax.nn.log_softmax(model.apply({"params": p}, t), -1))(
        params, tokens)

  return contract.train_kernel(init, train_step, log_probs=log_probs,
                               **_decoding_extras(model, num_models))


def _decoding_extras(model: nn.Module, num_models: int) -> dict[str, Callable[..., Any]]:
  """``make_lm_kernel``'s ``init_cache`` and ``step_log_probs`` (see its docstring)."""

  def init_cache(batch):
    cache = models.empty_cache(model, batch)
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_models, *x.shape)), cache)

  def step_log_probs(params, cache, tokens):
    decoder = model.clone(decode=True)

    def one(p, c, t):
      logits, new = decoder.apply({"params": p, "cache": c}, t[:, None], mutable=["cache"])
      return jax.nn.log_softmax(logits[:, 0], -1), new["cache"]
    return jax.vmap(one)(params, cache, tokens)

  return {"init_cache": init_cache, "step_log_probs": step_log_probs}


class DecodeOptions(NamedTuple):
  """Traced (not static) settings of :func:`decode`: changing them does not recompile."""
  rule: Array           # [] int32, RULE_FIXED | RULE_GRID | RULE_EXACT
  fixed: Array          # [2] float32, (alpha, beta) of RULE_FIXED
  temperature: Array    # [] float32, 0 = greedy
  block: Array          # [] bool, apply the n-gram blocker


def options(rule: int = RULE_GRID, fixed: tuple[float, float] = (0.5, 0.5),
            temperature: float = 0.0, block: bool = False) -> DecodeOptions:
  """Builds :class:`DecodeOptions` (validated)."""
  if rule not in (RULE_FIXED, RULE_GRID, RULE_EXACT):
    raise ValueError(f"rule must be RULE_FIXED, RULE_GRID or RULE_EXACT; got {rule}")
  if temperature < 0:
    raise ValueError(f"temperature must be >= 0; got {temperature}")
  return DecodeOptions(jnp.int32(rule), jnp.asarray(fixed, jnp.float32),
                       jnp.float32(temperature), jnp.asarray(block))


class DecodeSettings(NamedTuple):
  """Static settings of :func:`decode` (a change recompiles).

  Attributes:
    num_new: N, the tokens to generate.
    grid: [G] the official grid values (:func:`fusion.official_grid`).
    ngram_table: [K, n] int32 n-grams to block, or None (no blocker compiled in).
    bisection_iterations: halvings of the exact solver.
  """
  num_new: int
  grid: Array
  ngram_table: Array | None = None
  bisection_iterations: int = 40


class DecodeOutput(NamedTuple):
  tokens: Array           # [B, N] int32, the new tokens
  alpha: Array            # [B, N] float32, the weight of log p_1 used at each step
  beta: Array             # [B, N] float32, the weight of log p_2
  per_model: Array        # [B, N, 2] float32, F_i at the used weights
  grid_objective: Array   # [B, N] float32, J at the grid optimum (same state)
  exact_objective: Array  # [B, N] float32, J at the exact optimum (same state)
  exact_lambda: Array     # [B, N] float32, the exact optimum's lam
  history: Array          # [B, N + 1, 2] float32, S_i before each step (and at the end)


def blocked_tokens(context: Array, ngram_table: Array, vocab_size: int) -> Array:
  """MemFree: tokens that would complete an n-gram of ``ngram_table``.

  Args:
    context: [B, n - 1] the last n - 1 tokens; ngram_table: [K, n] int32.

  Returns:
    [B, V] bool.
  """
  match = jnp.all(context[:, None, :] == ngram_table[None, :, :-1], axis=-1)  # [B, K]
  hits = match.astype(jnp.float32) @ jax.nn.one_hot(ngram_table[:, -1], vocab_size)
  return hits > 0


def rule_weights(opts: DecodeOptions, by_grid: fusion.Weights, by_exact: fusion.Weights,
                 shape: tuple[int, ...]) -> tuple[Array, Array]:
  """(alpha, beta) [shape] of the rule of ``opts``: the grid's, the exact solver's or fixed."""
  alpha = jnp.select([opts.rule == RULE_GRID, opts.rule == RULE_EXACT],
                     [by_grid.alpha, by_exact.alpha], jnp.broadcast_to(opts.fixed[0], shape))
  beta = jnp.select([opts.rule == RULE_GRID, opts.rule == RULE_EXACT],
                    [by_grid.beta, by_exact.beta], jnp.broadcast_to(opts.fixed[1], shape))
  return alpha, beta


class _DecodeContext(NamedTuple):
  """What every step of :func:`decode`'s scan reads (fixed over the scan)."""
  log_probs_fn: Callable[..., Any]  # decode's log_probs, or decode_cached's step_log_probs
  pair_params: PyTree
  opts: DecodeOptions
  settings: DecodeSettings
  pairs: Array          # [G * G, 2] the grid's (alpha, beta) pairs
  prompt_len: int       # P


def _choose_token(ctx: _DecodeContext, fused: Array, buf: Array, pos: Array,
                  key: Array) -> tuple[Array, Array]:
  """Masks the blocked tokens, then the argmax or a sample: ([B] int32, the next key)."""
  ngram_table = ctx.settings.ngram_table
  if ngram_table is not None:
    n = ngram_table.shape[1]
    context = jax.lax.dynamic_slice_in_dim(buf, pos - (n - 2), n - 1, axis=1)
    blocked = blocked_tokens(context, ngram_table, fused.shape[-1]) & ctx.opts.block
    fused = jnp.where(blocked, -jnp.inf, fused)
  key, sub = jax.random.split(key)
  sampled = prng.categorical(sub, fused / jnp.maximum(ctx.opts.temperature, 1e-6), axis=-1)
  token = jnp.where(ctx.opts.temperature > 0, sampled, jnp.argmax(fused, axis=-1))
  return token.astype(jnp.int32), key


def _fuse_and_pick(ctx: _DecodeContext, logp: Array, buf: Array, history: Array,
                   key: Array, pos: Array):
  """The weights, the fused pick and the histories at one step, from both models' log-probs.

  Args:
    logp: [2, B, V] both models' next-token log-probabilities after position ``pos``.
    buf: [B, P + N] the tokens so far (position ``pos`` the last one written).
    history: [B, 2] S_i before this step.
    key: the sampling key.
    pos: [] int32.

  Returns:
    ((buf, history, key) after the step, the step's :class:`DecodeOutput` fields).
  """
  batch = buf.shape[0]
  l1, l2 = logp[0], logp[1]
  by_grid = fusion.grid_solve(l1, l2, history, ctx.pairs)
  by_exact = fusion.exact_solve(l1, l2, history, ctx.settings.bisection_iterations)
  alpha, beta = rule_weights(ctx.opts, by_grid, by_exact, (batch,))
  fused = fusion.fused_logits(alpha, beta, l1, l2)
  token, key = _choose_token(ctx, fused, buf, pos, key)
  buf = jax.lax.dynamic_update_slice_in_dim(buf, token[:, None], pos + 1, axis=1)
  chosen = jnp.take_along_axis(logp, token[None, :, None], axis=-1)[..., 0]  # [2, B]
  per_model = fusion.per_model_objective(alpha, beta, l1, l2, history)
  out = (token, alpha, beta, per_model, by_grid.objective, by_exact.objective,
         by_exact.alpha, history)
  return (buf, history + chosen.T, key), out


def _decode_step(ctx: _DecodeContext, carry: tuple[Array, Array, Array], t: Array):
  """One new token: both models' log-probs on the whole buffer, then the fused pick."""
  buf, history, key = carry
  batch, total = buf.shape
  pos = ctx.prompt_len + t - 1
  inputs = jnp.broadcast_to(buf[None, :, :total - 1], (2, batch, total - 1))
  logp = ctx.log_probs_fn(ctx.pair_params, inputs)                       # [2, B, T, V]
  logp = jax.lax.dynamic_index_in_dim(logp, pos, axis=2, keepdims=False)  # [2, B, V]
  return _fuse_and_pick(ctx, logp, buf, history, key, pos)


def _cached_decode_step(ctx: _DecodeContext, carry, t: Array):
  """One new token: both models on the last token alone (the cache holds the rest)."""
  (buf, history, key), cache = carry
  pos = ctx.prompt_len + t - 1
  last = jax.lax.dynamic_index_in_dim(buf, pos, axis=1, keepdims=False)  # [B]
  logp, cache = ctx.log_probs_fn(ctx.pair_params, cache,
                                 jnp.broadcast_to(last[None], (2, *last.shape)))
  state, out = _fuse_and_pick(ctx, logp, buf, history, key, pos)
  return (state, cache), out


def _decode_start(log_probs_fn: Callable[..., Any], pair_params: PyTree, prompts: Array,
                  key: Array, opts: DecodeOptions, settings: DecodeSettings):
  """Checks the inputs; returns the scan's context and first state ``(buffer [B, P + N],
  history [B, 2] zeros, key)``, shared by :func:`decode` and :func:`decode_cached`."""
  chex.assert_rank(prompts, 2)
  chex.assert_type(prompts, jnp.int32)
  num_new, ngram_table = int(settings.num_new), settings.ngram_table
  if num_new <= 0:
    raise ValueError(f"num_new must be positive; got {num_new}")
  batch, prompt_len = prompts.shape
  if ngram_table is not None and prompt_len < ngram_table.shape[1] - 1:
    raise ValueError(f"prompts must have at least n - 1 = {ngram_table.shape[1] - 1} "
                     f"tokens for the n-gram blocker; got {prompt_len}")
  buffer = jnp.concatenate([prompts, jnp.zeros((batch, num_new), jnp.int32)], axis=1)
  ctx = _DecodeContext(log_probs_fn, pair_params, opts, settings,
                       fusion.grid_pairs(settings.grid), prompt_len)
  return ctx, (buffer, jnp.zeros((batch, 2), jnp.float32), key)


def _decode_output(outs, final_history: Array) -> DecodeOutput:
  """The scan's stacked step outputs ([N, B, ...]) as :class:`DecodeOutput` ([B, N, ...])."""
  tokens, alpha, beta, per_model, grid_obj, exact_obj, lam, history = jax.tree.map(
      lambda x: jnp.moveaxis(x, 0, 1), outs)
  history = jnp.concatenate([history, final_history[:, None]], axis=1)
  return DecodeOutput(tokens, alpha, beta, per_model, grid_obj, exact_obj, lam, history)


def decode(log_probs_fn: Callable[[PyTree, Array], Array], pair_params: PyTree,
           prompts: Array, key: Array, opts: DecodeOptions,
           settings: DecodeSettings) -> DecodeOutput:
  """Decodes ``settings.num_new`` tokens from a pair of models under one weight rule.

  Each step recomputes both models on the whole (fixed-size) buffer, takes the last
  position's log-probabilities, solves for (alpha, beta) with the rule of ``opts`` (the
  grid and exact optima are always computed and reported), fuses ``alpha l_1 + beta l_2``,
  masks blocked tokens, picks the argmax (temperature 0) or samples, and adds each
  model's log-probability of the chosen token to its history S_i.

  Args:
    log_probs_fn: ``(params [2, ...], tokens [2, B, T]) -> [2, B, T, V]`` (the kernel's
      ``log_probs``).
    pair_params: the two models' parameters stacked on a leading axis of 2.
    prompts: [B, P] int32 (P >= n - 1 when blocking).
    key: typed PRNG key (used when sampling).
    opts: :class:`DecodeOptions`.
    settings: :class:`DecodeSettings` (N, the grid, the n-gram table, bisection steps).

  Returns:
    :class:`DecodeOutput`.
  """
  ctx, init = _decode_start(log_probs_fn, pair_params, prompts, key, opts, settings)
  (_, final_history, _), outs = jax.lax.scan(functools.partial(_decode_step, ctx), init,
                                             jnp.arange(int(settings.num_new)))
  return _decode_output(outs, final_history)


def decode_cached(step_log_probs: Callable[[PyTree, PyTree, Array], tuple[Array, PyTree]],
                  cache: PyTree, pair_params: PyTree, prompts: Array, key: Array,
                  opts: DecodeOptions, settings: DecodeSettings) -> DecodeOutput:
  """:func:`decode` with the models run one position at a time on a key-value cache.

  The same decode as :func:`decode` (the same rule, picks, histories and outputs): the
  log-probabilities after position t depend on the tokens up to t only (causal models),
  so instead of recomputing both models on the whole buffer at every step (P + N
  positions), each step runs them on the newest token alone and reads the earlier
  positions' attention keys and values from ``cache``: ~(P + N) times fewer model FLOPs.
  The prompt's first P - 1 tokens fill the cache first. The two forms agree to float
  rounding (the matmuls see other shapes), not bit for bit.

  Args:
    step_log_probs: ``(params [2, ...], cache, tokens [2, B]) -> ([2, B, V], cache)`` (the
      kernel's ``step_log_probs``).
    cache: the pair's empty cache (the kernel's ``init_cache(B)`` with M = 2), room for at
      least P + N - 1 positions.
    pair_params, prompts, key, opts, settings: as :func:`decode`.

  Returns:
    :class:`DecodeOutput`.
  """
  ctx, state = _decode_start(step_log_probs, pair_params, prompts, key, opts, settings)
  batch, prompt_len = prompts.shape

  def prefill(cache, tokens):                                             # tokens [B]
    _, cache = step_log_probs(pair_params, cache, jnp.broadcast_to(tokens[None],
                                                                   (2, batch)))
    return cache, None

  cache, _ = jax.lax.scan(prefill, cache, jnp.moveaxis(prompts[:, :prompt_len - 1], 1, 0))
  init = (state, cache)
  ((_, final_history, _), _), outs = jax.lax.scan(
      functools.partial(_cached_decode_step, ctx), init, jnp.arange(int(settings.num_new)))
  return _decode_output(outs, final_history)


def fused_token_log_probs(logp_pair: Array, targets: Array, opts: DecodeOptions, *,
                          grid: Array, bisection_iterations: int = 40) -> Array:
  """Teacher forcing: log q_t(y_t) of the fused model along given sequences.

  The history S_i at position t is the log-likelihood of targets[:, :t] under model i (the
  whole target sequence counts as generated).

  Args:
    logp_pair: [2, B, T, V] the two models' next-token log-probabilities.
    targets: [B, T] int32.
    opts: the rule (temperature and blocking are ignored).
    grid: [G] the official grid values.

  Returns:
    [B, T] float32.
  """
  chex.assert_rank([logp_pair, targets], [4, 2])
  token_lp = jnp.take_along_axis(logp_pair, targets[None, ..., None], axis=-1)[..., 0]
  history = jnp.cumsum(token_lp, axis=-1) - token_lp                     # [2, B, T]
  history = jnp.moveaxis(history, 0, -1)                                  # [B, T, 2]
  pairs = fusion.grid_pairs(grid)

  def row(args):
    l1, l2, hist, target = args                                           # [T, V] ..., [T]
    by_grid = fusion.grid_solve(l1, l2, hist, pairs)
    by_exact = fusion.exact_solve(l1, l2, hist, bisection_iterations)
    alpha, beta = rule_weights(opts, by_grid, by_exact, target.shape)
    fused = jax.nn.log_softmax(fusion.fused_logits(alpha, beta, l1, l2), axis=-1)
    return jnp.take_along_axis(fused, target[:, None], axis=-1)[:, 0]

  return jax.lax.map(row, (logp_pair[0], logp_pair[1], history, targets))
