"""Pure kernels of CCA: pretraining, the alignment losses (CCA, DPO, unlearning), samplers.

* :func:`pretrain_loss`: next-token cross-entropy with condition dropout to the null label;
  :func:`make_pretrain_kernel` trains R runs (seeds) in one program.
* :func:`alignment_loss`: condition contrastive alignment between the trained model theta
  and its frozen copy phi (the reference, a parameter pytree), with matched labels as
  positives and rolled (or shuffled) labels as negatives (:func:`negative_labels`); DPO and
  unlearning on the same pairs (:func:`contrastive_objective`). :func:`make_align_kernel`
  trains R runs (seeds x lambdas) at once.
* :func:`make_sampler`: ancestral sampling as one ``lax.scan`` over positions, guidance-free
  or with classifier-free guidance (logits mixed at every token), with a KV cache or full
  prefix recompute.

The loss of one batch (z, c), with g(z, c) = log p_theta(z|c) - log p_phi(z|c) summed over
tokens, c- = roll(c, -1), M_i ~ Bernoulli(uncond_ratio) sending both labels to null, and
P_i = M_i or c-_i == c_i the rows treated as positive (weight 1, sign +1; else lambda, -1):

  L_CCA = [ -mean log sigma(beta g(z, c)) - mean w_i log sigma(e_i beta g(z, c-)) ]
          / max(lambda, 1).

The kernels compose :mod:`core.blocks <jaxlib_papers.core.blocks>`: one member's step is a
``blocks.gradient_step`` on the loss, the R members are ``blocks.vmap_members`` /
``blocks.vmap_init`` over it. No jit here: the caller (train_loop, a test) applies it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.cca import models
from jaxlib_papers.core import blocks, contract, prng

Array = jax.Array
PyTree = Any
LogProbFn = Callable[[PyTree, Array, Array], Array]   # (params, labels [B], tokens [B, L]) -> [B]

LOSSES = ("cca", "dpo", "unlearn")
NEGATIVES = ("roll", "shuffle")


def sequence_logprob(model: models.ARTransformer) -> LogProbFn:
  """``logprob(params, labels [B], tokens [B, L]) -> [B]``: log p(z | c) summed over tokens."""

  def logprob(params: PyTree, labels: Array, tokens: Array) -> Array:
    logits = model.apply(params, labels, tokens)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.sum(jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0], axis=-1)

  return logprob


def _check_batch(batch: dict[str, Array], num_runs: int) -> None:
  tokens, labels = batch["tokens"], batch["labels"]
  if tokens.ndim != 3 or labels.shape != tokens.shape[:2] or tokens.shape[1] != num_runs:
    raise ValueError(f"batch must hold tokens [B, {num_runs}, L] and labels [B, {num_runs}] "
                     f"(runs second); got {tokens.shape} and {labels.shape}")


def _per_run(batch: dict[str, Array]) -> dict[str, Array]:
  return jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), batch)


# --------------------------------------------------------------------------- pretraining

class PretrainSettings(NamedTuple):
  label_dropout: float = 0.1   # p: share of rows whose label becomes null
  null_label: int = 10         # index of the null label (K)


class PretrainState(NamedTuple):
  step: Array        # [R] int32
  params: PyTree     # model params, each leaf [R, ...]
  opt_state: PyTree  # optimiser state, leaves [R, ...]
  key: Array         # [R] typed PRNG keys


def pretrain_loss(logprob: LogProbFn, params: PyTree, tokens: Array, labels: Array,
                  key: Array, settings: PretrainSettings) -> Array:
  """Mean next-token cross-entropy (nats / token) with labels dropped to null w.p. p.

  Args:
    tokens: [B, L] int; labels: [B] int in [0, K).
  """
  drop = prng.bernoulli(key, settings.label_dropout, labels.shape)
  labels = jnp.where(drop, settings.null_label, labels)
  return -jnp.mean(logprob(params, labels, tokens)) / tokens.shape[-1]


def _pretrain_init_member(model: models.ARTransformer, optimizer: optax.GradientTransformation,
                          key: Array) -> PretrainState:
  k_init, k_state = jax.random.split(key)
  params = model.init(k_init, jnp.zeros((1,), jnp.int32),
                      jnp.zeros((1, model.length), jnp.int32))
  return PretrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params), k_state)


def _pretrain_step_member(update: Callable[..., blocks.Update], settings: PretrainSettings,
                          state: PretrainState, batch: dict[str, Array]):
  key, sub = jax.random.split(state.key)
  out = update(state.params, state.opt_state, batch["tokens"], batch["labels"], sub, settings)
  return PretrainState(state.step + 1, out.params, out.opt_state, key), {"loss": out.loss}


def make_pretrain_kernel(model: models.ARTransformer, optimizer: optax.GradientTransformation,
                         *, num_runs: int = 1, label_dropout: float = 0.1,
                         runs_in_sequence: bool | None = None) -> contract.TrainKernel:
  """Class-conditional pretraining of R independent runs (one per seed) in one program.

  ``train_step(state, batch)``: batch {"tokens": [B, R, L], "labels": [B, R]}; metrics the
  mean and max loss over runs. Extra ``evaluate(params [R, ...], tokens [N, L], labels [N])
  -> [R]`` per-run test NLL (nats / token). ``runs_in_sequence``: the runs one after another
  in the program rather than batched under ``vmap`` (``blocks.vmap_members(sequential=)``;
  None: ``blocks.members_in_sequence_by_default()``, on CPU devices of one core each: a
  step 1.6x faster there at the ``cpu`` preset, ``seeds/cca.md``).
  """
  if num_runs < 1:
    raise ValueError(f"num_runs must be >= 1, got {num_runs}")
  if not 0.0 <= label_dropout < 1.0:
    raise ValueError(f"label_dropout must be in [0, 1), got {label_dropout}")
  logprob = sequence_logprob(model)
  settings = PretrainSettings(label_dropout, model.num_classes)
  update = blocks.gradient_step(functools.partial(pretrain_loss, logprob), optimizer)
  members = blocks.vmap_members(functools.partial(_pretrain_step_member, update, settings),
                                batch_axis=0, rules={"loss": ("mean", "max")},
                                sequential=runs_in_sequence)

  def train_step(state: PretrainState, batch: dict[str, Array]):
    _check_batch(batch, num_runs)
    return members(state, _per_run(batch))

  def evaluate(params: PyTree, tokens: Array, labels: Array) -> Array:
    return jax.vmap(lambda p: -jnp.mean(logprob(p, labels, tokens)) / tokens.shape[-1])(params)

  init = blocks.vmap_init(functools.partial(_pretrain_init_member, model, optimizer), num_runs)
  return contract.train_kernel(init, train_step, evaluate=evaluate)


# --------------------------------------------------------------------------- alignment

class AlignSettings(NamedTuple):
  loss: str = "cca"            # "cca" | "dpo" | "unlearn"
  beta: float = 0.02           # beta: scale of the log-likelihood ratio
  uncond_ratio: float = 0.1    # share of rows whose labels both become null
  negatives: str = "roll"      # "roll" (official, collisions count as positives) | "shuffle"
  null_label: int = 10         # index of the null label (K)


def check_settings(settings: AlignSettings) -> AlignSettings:
  if settings.loss not in LOSSES:
    raise ValueError(f"settings.loss must be one of {LOSSES}, got {settings.loss!r}")
  if settings.negatives not in NEGATIVES:
    raise ValueError(f"settings.negatives must be one of {NEGATIVES}, "
                     f"got {settings.negatives!r}")
  if not float(settings.beta) > 0:
    raise ValueError(f"settings.beta must be > 0, got {settings.beta}")
  if not 0.0 <= float(settings.uncond_ratio) < 1.0:
    raise ValueError(f"settings.uncond_ratio must be in [0, 1), got {settings.uncond_ratio}")
  return settings


def negative_labels(labels: Array, key: Array, settings: AlignSettings
                    ) -> tuple[Array, Array, Array, Array]:
  """The pairs of one batch: (labels, negatives, unconditional mask, positive mask), all [B].

  ``roll``: c- = roll(c, -1) and a collision c- == c counts as a positive (the official
  rule); ``shuffle``: c- = c[perm], every row a negative (pairs from p(x) p(c), the theory).
  Rows drawn unconditional (prob ``uncond_ratio``) get the null label on both sides and count
  as positives.
  """
  k_uncond, k_perm = jax.random.split(key)
  if settings.negatives == "roll":
    negatives = jnp.roll(labels, -1, axis=0)
    collide = negatives == labels
  else:
    negatives = labels[jax.random.permutation(k_perm, labels.shape[0])]
    collide = jnp.zeros(labels.shape, bool)
  uncond = prng.bernoulli(k_uncond, settings.uncond_ratio, labels.shape)
  labels = jnp.where(uncond, settings.null_label, labels)
  negatives = jnp.where(uncond, settings.null_label, negatives)
  return labels, negatives, uncond, uncond | collide


def contrastive_objective(gap_pos: Array, gap_neg: Array, positive: Array, lam: Array,
                          settings: AlignSettings) -> Array:
  """The loss [] of the gaps g(z, c) [B] and g(z, c-) [B] (positive [B]: weight 1, sign +1).

  CCA and unlearning are divided by max(lambda, 1); DPO ignores lambda.
  """
  beta = settings.beta
  weight = jnp.where(positive, 1.0, lam)
  sign = jnp.where(positive, 1.0, -1.0)
  if settings.loss == "cca":
    loss = (-jnp.mean(jax.nn.log_sigmoid(beta * gap_pos))
            - jnp.mean(weight * jax.nn.log_sigmoid(sign * beta * gap_neg)))
    return loss / jnp.maximum(lam, 1.0)
  if settings.loss == "unlearn":
    return (-jnp.mean(gap_pos) - jnp.mean(weight * sign * gap_neg)) / jnp.maximum(lam, 1.0)
  return -jnp.mean(jax.nn.log_sigmoid(beta * (gap_pos - gap_neg)))  # dpo


def alignment_loss(logprob: LogProbFn, params: PyTree, reference: PyTree, tokens: Array,
                   labels: Array, key: Array, lam: Array | float, settings: AlignSettings
                   ) -> tuple[Array, dict[str, Array]]:
  """CCA / DPO / unlearning loss of one batch (see the module docstring).

  Args:
    logprob: ``(params, labels [B], tokens [B, L]) -> [B]`` summed log-likelihoods.
    params: theta (trained); reference: phi (frozen; no gradient flows into it).
    tokens: [B, L] int; labels: [B] int in [0, K).
    key: typed PRNG key (unconditional rows, shuffles).
    lam: lambda >= 0, the negatives' weight (a scalar, may be traced).
    settings: :class:`AlignSettings`.

  Returns:
    (loss [], aux) with aux the mean gaps and the share of rows where g+ > g-.
  """
  chex.assert_rank([tokens, labels], [2, 1])
  chex.assert_equal_shape_prefix([tokens, labels], 1)
  batch = labels.shape[0]
  labels, negatives, _, positive = negative_labels(labels, key, settings)
  both_labels = jnp.concatenate([labels, negatives])
  both_tokens = jnp.concatenate([tokens, tokens])
  reference = jax.lax.stop_gradient(reference)
  gap = logprob(params, both_labels, both_tokens) - logprob(reference, both_labels, both_tokens)
  gap_pos, gap_neg = gap[:batch], gap[batch:]
  loss = contrastive_objective(gap_pos, gap_neg, positive, jnp.asarray(lam, gap.dtype),
                               settings)
  aux = {"gap_pos": jnp.mean(gap_pos), "gap_neg": jnp.mean(gap_neg),
         "pair_accuracy": jnp.mean((gap_pos > gap_neg).astype(gap.dtype))}
  return loss, aux


class AlignState(NamedTuple):
  step: Array        # [R] int32
  params: PyTree     # theta, leaves [R, ...]
  reference: PyTree  # phi, frozen copy, leaves [R, ...]
  lam: Array         # [R] float32, lambda of each run
  opt_state: PyTree  # leaves [R, ...]
  key: Array         # [R] typed PRNG keys


def _align_init_member(optimizer: optax.GradientTransformation, treedef: Any, key: Array,
                       lam: Array, *reference_leaves: Array) -> AlignState:
  # The reference arrives as its leaves: blocks.vmap_init maps arrays, not pytrees.
  reference = jax.tree.unflatten(treedef, reference_leaves)
  return AlignState(jnp.zeros((), jnp.int32), reference, reference, lam,
                    optimizer.init(reference), key)


def _align_step_member(update: Callable[..., blocks.Update], settings: AlignSettings,
                       state: AlignState, batch: dict[str, Array]):
  key, sub = jax.random.split(state.key)
  out = update(state.params, state.opt_state, state.reference, batch["tokens"],
               batch["labels"], sub, state.lam, settings)
  return (AlignState(state.step + 1, out.params, state.reference, state.lam, out.opt_state,
                     key), {"loss": out.loss, **out.aux})


def _check_lambdas(lambdas: Array, references: PyTree) -> np.ndarray:
  lambdas = np.asarray(lambdas, np.float32)
  if lambdas.ndim != 1 or np.any(lambdas < 0) or not np.all(np.isfinite(lambdas)):
    raise ValueError(f"lambdas must be a 1-D array of finite values >= 0, got {lambdas}")
  leading = {x.shape[0] for x in jax.tree.leaves(references)}
  if leading != {lambdas.shape[0]}:
    raise ValueError(f"references must have a leading run axis of {lambdas.shape[0]} (one "
                     f"per lambda); got leading sizes {sorted(leading)}")
  return lambdas


def make_align_kernel(logprob: LogProbFn, optimizer: optax.GradientTransformation,
                      settings: AlignSettings, references: PyTree, lambdas: Array, *,
                      runs_in_sequence: bool | None = None) -> contract.TrainKernel:
  """Alignment fine-tuning of R runs at once, each from its own frozen reference.

  Args:
    logprob: the model's summed log-likelihood (:func:`sequence_logprob` or a toy's).
    optimizer: e.g. AdamW(b1=0.9, b2=0.95) after clipping.
    settings: :class:`AlignSettings` (static).
    references: phi of each run, leaves [R, ...]; theta starts there (g = 0 at step 0).
    lambdas: [R] lambda >= 0 of each run.
    runs_in_sequence: as in :func:`make_pretrain_kernel` (an alignment step 1.6x faster
      one run after another on one core at the ``cpu`` preset).

  ``train_step(state, batch)``: batch {"tokens": [B, R, L], "labels": [B, R]}; metrics the
  means over runs.
  """
  settings = check_settings(settings)
  lambdas = _check_lambdas(lambdas, references)
  num_runs = lambdas.shape[0]
  host_refs = jax.tree.map(np.asarray, references)
  ref_shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), host_refs)
  init_member = functools.partial(_align_init_member, optimizer,
                                  jax.tree.structure(host_refs))
  update = blocks.gradient_step(functools.partial(alignment_loss, logprob), optimizer,
                                has_aux=True)
  members = blocks.vmap_members(functools.partial(_align_step_member, update, settings),
                                batch_axis=0, sequential=runs_in_sequence)

  def init(key: Array) -> AlignState:
    # The references come in through a host callback rather than as closed-over constants:
    # XLA would otherwise embed (and constant-fold through) every run's parameters, which
    # took minutes to compile at the cpu preset.
    refs = jax.pure_callback(lambda: host_refs, ref_shapes)
    return blocks.vmap_init(init_member, num_runs, lambdas, *jax.tree.leaves(refs))(key)

  def train_step(state: AlignState, batch: dict[str, Array]):
    _check_batch(batch, num_runs)
    return members(state, _per_run(batch))

  return contract.train_kernel(init, train_step)


# --------------------------------------------------------------------------- sampling

def make_sampler(model: models.ARTransformer, *, guided: bool, use_cache: bool = True,
                 temperature: float = 1.0):
  """``sample(params, labels [B], key, scale []) -> tokens [B, L]`` (one ``lax.scan``).

  Guidance-free (``guided=False``, one pass, ``scale`` ignored) or classifier-free guided:
  the conditional and null-label logits l_c, l_u are mixed at every token as
  l = l_c + s (l_c - l_u) (the paper's s; LlamaGen's cfg_scale is 1 + s). ``use_cache``
  decodes one position at a time against a KV cache; otherwise the whole prefix is
  recomputed at every position (same distribution, quadratic cost).
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  length, null = model.length, model.num_classes

  def mix(logits: Array, scale: Array, batch: int) -> Array:
    if not guided:
      return logits
    cond, uncond = logits[:batch], logits[batch:]
    return cond + scale * (cond - uncond)

  def sample(params: PyTree, labels: Array, key: Array, scale: Array | float = 0.0) -> Array:
    chex.assert_rank(labels, 1)
    batch = labels.shape[0]
    run_labels = jnp.concatenate([labels, jnp.full_like(labels, null)]) if guided else labels
    keys = jax.random.split(key, length)
    scale = jnp.asarray(scale, jnp.float32)

    if use_cache:
      def body(carry, inputs):
        cache, previous = carry
        position, k = inputs
        logits, cache = model.apply(params, run_labels, previous, position, cache,
                                    method=models.ARTransformer.decode)
        token = prng.categorical(k, mix(logits, scale, batch) / temperature)
        both = jnp.concatenate([token, token]) if guided else token
        return (cache, both), token

      carry = (models.init_cache(model, run_labels.shape[0]),
               jnp.zeros(run_labels.shape, jnp.int32))
      _, tokens = jax.lax.scan(body, carry, (jnp.arange(length), keys))
      return tokens.T

    def body_full(tokens, inputs):
      position, k = inputs
      both = jnp.concatenate([tokens, tokens]) if guided else tokens
      logits = jax.lax.dynamic_index_in_dim(model.apply(params, run_labels, both), position,
                                            axis=1, keepdims=False)
      token = prng.categorical(k, mix(logits, scale, batch) / temperature)
      return jax.lax.dynamic_update_index_in_dim(tokens, token, position, axis=1), None

    tokens, _ = jax.lax.scan(body_full, jnp.zeros((batch, length), jnp.int32),
                             (jnp.arange(length), keys))
    return tokens

  return sample
