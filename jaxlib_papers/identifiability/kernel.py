"""Cross-entropy identifiability: supervised and DIET training, every run in one kernel.

An encoder ``f`` and a bias-free linear head ``W`` (``K = |C|`` rows for supervised
training on the cluster label, ``K = N`` rows for DIET on the instance index) minimise
the cross-entropy of ``softmax(W f(x))`` on fresh samples of the vMF mixture (``data.py``).
Options of Theorem 1: ``normalize_head`` renormalises the rows of ``W`` before every step
(the official ``--normalize-rows-W``); ``normalize_features`` puts ``f(x)`` on the sphere,
and when both are normalised a learnable temperature ``beta`` multiplies the logits (at
the optimum ``beta -> kappa``).

Every state leaf carries a leading *run* axis: runs are ``num_seeds x variants``, a
variant being a concentration ``kappa`` and a ``normalize_head`` flag (equal shapes, so
they share one compiled program). A seed fixes the cluster vectors, the mixing ``g``, the
initialisation and the data stream; the variants of one seed share its problem, so their
differences are paired. ``train_step`` runs ``steps_per_call`` Adam steps of every run as
one ``lax.scan``, the runs one after another on CPU devices of one core each and batched
under ``jax.vmap`` elsewhere (``Settings.runs_in_sequence``); the batch argument is unused
(the kernel draws its own data from the state's key, like the official code's fresh samples
every step).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import blocks, contract, prng
from jaxlib_papers.identifiability import data as data_lib
from jaxlib_papers.identifiability import evaluate as eval_lib
from jaxlib_papers.identifiability.models import Encoder

OBJECTIVES = ("supervised", "diet")
# How the per-run metrics of a call become the loop's scalars.
MEMBER_RULES = {"loss": ("mean", "max"), "r2_batch": ("mean", "min"), "rejected": ("sum",)}


class Settings(NamedTuple):
  """Static settings of one compiled program (shapes and switches)."""
  dim: int                       # d, latent = observation dimension
  num_classes: int               # |C|, cluster vectors
  num_indices: int               # N, instance indices (DIET labels)
  objective: str                 # "supervised" (y = c) | "diet" (y = I)
  conditional: str = "vmf"       # "vmf" | "laplace" | "normal"
  normalize_features: bool = False   # f(x) on the sphere (with a temperature if W is too)
  hidden: tuple[int, ...] = (50, 250, 250, 250, 250, 50)   # paper: [10d, 50d x4, 10d]
  batch_norm: bool = True
  negative_slope: float = 0.01
  batch_size: int = 1024
  learning_rate: float = 1e-3
  decay_steps: int = 0           # > 0: cosine decay of the step size to 0 over this many
  steps_per_call: int = 10
  num_proposals: int = 12         # Wood proposals per vMF sample
  mixing_layers: int = 4
  mixing_candidates: int = 2048
  input_dim: int = 0              # p, the observations' dimension (0: d, as x = g(z))
  # The head's logits and CE one run at a time under the run vmap (blocks.member_mapped_loss:
  # the trained state bitwise the same at the presets' shapes, 10-15% faster a step on
  # XLA:CPU); False: batched over the runs, as vmap makes them; None: True on a CPU backend
  # only (on an accelerator the runs' loop would serialise what vmap runs in parallel)
  head_per_member: bool | None = None
  # The runs one after another in the program (blocks.vmap_members(sequential=True)), not
  # batched under vmap: 1.14x (DIET) and 1.22x (supervised) faster a step at the cpu
  # preset's 6 runs on one core (seeds/identifiability.md, "Runs one after another");
  # None: where blocks.members_in_sequence_by_default() says (one core per CPU device).
  # (head_per_member then has no vmap to act under.)
  runs_in_sequence: bool | None = None

  @property
  def num_labels(self) -> int:
    """K, the number of head rows."""
    return self.num_classes if self.objective == "supervised" else self.num_indices


class Variants(NamedTuple):
  """Per-run scalars (vmapped, equal shapes)."""
  kappa: np.ndarray            # [R] float32, vMF concentration (Laplace/Normal: 10 x scale)
  normalize_head: np.ndarray   # [R] bool, renormalise the rows of W before every step
  seed_index: np.ndarray       # [R] int32, which seed (problem, init, data) a run uses


def make_variants(num_seeds: int, kappas: Sequence[float],
                  normalize_head: Sequence[bool] = (False,)) -> Variants:
  """Runs in seed-major order: ``run = seed * V + variant`` over ``kappas x normalize_head``."""
  if num_seeds < 1:
    raise ValueError(f"num_seeds must be >= 1; got {num_seeds}")
  if not kappas or any(float(k) <= 0 for k in kappas):
    raise ValueError(f"kappas must be a non-empty list of positive numbers; got {kappas}")
  combos = list(itertools.product([float(k) for k in kappas], [bool(b) for b in normalize_head]))
  rows = [(s, k, b) for s in range(num_seeds) for k, b in combos]
  return Variants(np.array([r[1] for r in rows], np.float32),
                  np.array([r[2] for r in rows], bool),
                  np.array([r[0] for r in rows], np.int32))


class TrainState(NamedTuple):
  """Everything a resume needs; every leaf has the leading run axis R."""
  params: Any                # {"encoder", "head": [R, K, d], "log_temperature": [R]}
  batch_stats: Any           # BatchNorm running averages of the encoder
  opt_state: Any             # Adam moments
  problem: data_lib.Problem  # centers [R, C, d], mixing [R, L, d, d] (frozen)
  kappa: jax.Array           # [R] float32
  normalize_head: jax.Array  # [R] bool
  key: jax.Array             # [R] typed PRNG keys of the data stream
  step: jax.Array            # [R] int32, optimiser steps taken


def validate_settings(settings: Settings) -> Settings:
  """``settings`` if valid (``head_per_member=None`` resolved for this backend); a
  ValueError naming the field otherwise."""
  if settings.objective not in OBJECTIVES:
    raise ValueError(f"objective must be one of {OBJECTIVES}; got {settings.objective!r}")
  if settings.conditional not in data_lib.CONDITIONALS:
    raise ValueError(f"conditional must be one of {data_lib.CONDITIONALS}; got "
                     f"{settings.conditional!r}")
  for name in ("dim", "num_classes", "num_indices", "batch_size", "steps_per_call"):
    if int(getattr(settings, name)) < 1:
      raise ValueError(f"{name} must be >= 1; got {getattr(settings, name)}")
  if settings.dim < 2:
    raise ValueError(f"dim must be >= 2 (latents on S^(d-1)); got {settings.dim}")
  if settings.learning_rate <= 0:
    raise ValueError(f"learning_rate must be > 0; got {settings.learning_rate}")
  if settings.head_per_member is None:
    settings = settings._replace(head_per_member=jax.default_backend() == "cpu")
  if settings.runs_in_sequence is None:
    settings = settings._replace(runs_in_sequence=blocks.members_in_sequence_by_default())
  return settings


def encoder(settings: Settings) -> Encoder:
  """The encoder ``f`` of ``settings``."""
  return Encoder(tuple(settings.hidden), settings.dim, settings.batch_norm,
                 settings.negative_slope)


def optimizer(settings: Settings) -> optax.GradientTransformation:
  """Adam, with a cosine decay of the step size when ``decay_steps > 0``."""
  lr = (optax.cosine_decay_schedule(settings.learning_rate, settings.decay_steps)
        if settings.decay_steps > 0 else settings.learning_rate)
  return optax.adam(lr)


def head_rows(params: Any, normalize_head: jax.Array) -> jax.Array:
  """The head ``W: [K, d]`` as used in the logits (unit rows when ``normalize_head``)."""
  w = params["head"]
  return jnp.where(normalize_head, data_lib.normalize(w), w)


def head_inputs(settings: Settings, features: jax.Array, params: Any,
                normalize_head: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(h [n, d], W [K, d])`` with logits ``h @ W.T``: ``h = f(x)``, or ``beta f(x)`` on the
  sphere when f and W are both normalised; ``W`` as :func:`head_rows` gives it."""
  w = head_rows(params, normalize_head)
  if settings.normalize_features:
    scale = jnp.where(normalize_head, jnp.exp(params["log_temperature"]), 1.0)
    return scale * data_lib.normalize(features), w
  return features, w


def logits_fn(settings: Settings, features: jax.Array, params: Any,
              normalize_head: jax.Array) -> jax.Array:
  """``[n, K]`` logits ``<w_j, f(x)>`` (times ``beta`` when f and W are both normalised)."""
  h, w = head_inputs(settings, features, params, normalize_head)
  return h @ w.T


def head_cross_entropy(h: jax.Array, w: jax.Array, y: jax.Array) -> jax.Array:
  """Mean CE of ``softmax(h @ w.T)`` on ``y``; h: [n, d], w: [K, d], y: [n] int."""
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ w.T, y))


# The same, one run at a time under the run vmap (Settings.head_per_member): 10-15% off a
# 6-run step on XLA:CPU; at the presets' shapes the trained state is bitwise the same.
_member_head_cross_entropy = blocks.member_mapped_loss(head_cross_entropy, argnums=(0, 1))


def target_labels(settings: Settings, batch: data_lib.Batch) -> jax.Array:
  """The CE labels: the cluster ``c`` (supervised) or the instance index ``I`` (DIET)."""
  return batch.label if settings.objective == "supervised" else batch.index


def cross_entropy(params: Any, batch_stats: Any, x: jax.Array, y: jax.Array,
                  normalize_head: jax.Array, *, settings: Settings
                  ) -> tuple[jax.Array, tuple[Any, jax.Array]]:
  """The training loss: mean CE of ``softmax(W f(x))`` on ``y``, BatchNorm in train mode.

  Args:
    params: one run's ``{"encoder", "head": [K, d], "log_temperature": []}``.
    batch_stats: the encoder's BatchNorm running averages.
    x: [n, d] observations; y: [n] int labels.
    normalize_head: [] bool.
    settings: the static settings.

  Returns:
    ``(loss [], (new batch_stats, features [n, d]))``.
  """
  features, updates = encoder(settings).apply(
      {"params": params["encoder"], "batch_stats": batch_stats}, x, train=True,
      mutable=["batch_stats"])
  head_features, w = head_inputs(settings, features, params, normalize_head)
  ce = _member_head_cross_entropy if settings.head_per_member else head_cross_entropy
  loss = ce(head_features, w, y)
  return loss, (updates.get("batch_stats", {}), features)


def init_params(settings: Settings, k_model: jax.Array, k_head: jax.Array
                ) -> tuple[Any, Any]:
  """One run's ``(params, batch_stats)``: encoder, head ``[K, d]`` uniform in +-1/sqrt(d)."""
  d = settings.dim
  variables = encoder(settings).init(k_model, jnp.zeros((2, settings.input_dim or d)),
                                     train=False)
  bound = 1.0 / np.sqrt(d)
  params = {"encoder": variables["params"],
            "head": prng.uniform(k_head, (settings.num_labels, d), minval=-bound,
                                 maxval=bound),
            "log_temperature": jnp.zeros((), jnp.float32)}
  return params, variables.get("batch_stats", {})


def init_run(settings: Settings, key: jax.Array, kappa: jax.Array,
             normalize_head: jax.Array) -> TrainState:
  """One run's state (no run axis): its problem, encoder, head and data key from ``key``."""
  k_problem, k_model, k_head, k_data = jax.random.split(key, 4)
  problem = data_lib.make_problem(k_problem, settings.dim, settings.num_classes,
                                  mixing_layers=settings.mixing_layers,
                                  mixing_candidates=settings.mixing_candidates)
  params, batch_stats = init_params(settings, k_model, k_head)
  return TrainState(params, batch_stats, optimizer(settings).init(params),
                    problem, jnp.asarray(kappa, jnp.float32),
                    jnp.asarray(normalize_head, bool), k_data, jnp.zeros((), jnp.int32))


def train_step_run(settings: Settings, update: Callable[..., blocks.Update],
                   state: TrainState, batch: Any = None
                   ) -> tuple[TrainState, dict[str, jax.Array]]:
  """One Adam step of one run (no run axis) on a fresh batch drawn from its key.

  Args:
    settings: the static settings.
    update: ``blocks.gradient_step(cross_entropy, tx, has_aux=True)``.
    state: one run's state.
    batch: unused (the kernel draws its own data).

  Returns:
    ``(state, {"loss", "rejected", "features": [B, d], "z": [B, d]})``.
  """
  del batch
  key, k_batch = jax.random.split(state.key)
  batch = data_lib.sample_batch(k_batch, state.problem, state.kappa, settings.batch_size,
                                settings.num_indices, settings.conditional,
                                num_proposals=settings.num_proposals)
  # The official --normalize-rows-W: rows are put back on the sphere before each step.
  params = {**state.params, "head": head_rows(state.params, state.normalize_head)}
  out = update(params, state.opt_state, state.batch_stats, batch.x,
               target_labels(settings, batch), state.normalize_head)
  batch_stats, feats = out.aux
  new = state._replace(params=out.params, batch_stats=batch_stats, opt_state=out.opt_state,
                       key=key, step=state.step + 1)
  return new, {"loss": out.loss, "rejected": batch.rejected, "features": feats, "z": batch.z}


def call_metrics(stacked: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """One run's metrics of a call from its ``[k]``-stacked step metrics.

  A learning curve for free: the in-sample R^2 of z from f(x) on the call's last batch.
  """
  return {"loss": jnp.mean(stacked["loss"]),
          "r2_batch": eval_lib.insample_r2(stacked["features"][-1], stacked["z"][-1]),
          "rejected": jnp.sum(stacked["rejected"])}


def make_kernel(settings: Settings, variants: Variants) -> contract.TrainKernel:
  """The train kernel of ``settings`` for the runs of ``variants`` (run axis vmapped).

  ``train_step`` runs ``steps_per_call`` steps of :func:`train_step_run` per run as one
  scan; the per-run metrics become ``loss`` (mean), ``loss_max``, ``r2_batch`` (mean),
  ``r2_batch_min`` and ``rejected`` (sum) by :data:`MEMBER_RULES`.

  Returns:
    A TrainKernel with extras ``features(state_run, x) -> [n, d]`` (eval mode, one run)
    and ``evaluate(state, key, num_samples=8192) -> dict of [R] arrays`` (the paper's
    protocol on fresh samples).
  """
  settings = validate_settings(settings)
  chex.assert_equal_shape([variants.kappa, variants.normalize_head, variants.seed_index])
  update = blocks.gradient_step(functools.partial(cross_entropy, settings=settings),
                                optimizer(settings), has_aux=True)
  step = blocks.scan_steps(functools.partial(train_step_run, settings, update),
                           settings.steps_per_call, metrics=call_metrics)
  init = blocks.vmap_init(functools.partial(init_run, settings), variants.kappa.shape[0],
                          variants.kappa, variants.normalize_head,
                          seed_index=variants.seed_index)
  return contract.train_kernel(
      init, blocks.vmap_members(step, rules=MEMBER_RULES,
                                sequential=settings.runs_in_sequence),
      features=functools.partial(features, settings),
      evaluate=functools.partial(evaluate, settings, variants.seed_index))


def features(settings: Settings, state_run: TrainState, x: jax.Array) -> jax.Array:
  """``f(x)`` of one run in eval mode (BatchNorm running averages); x: [n, d]."""
  return encoder(settings).apply({"params": state_run.params["encoder"],
                                  "batch_stats": state_run.batch_stats}, x, train=False)


def evaluate_run(settings: Settings, state_run: TrainState, key: jax.Array,
                 num_samples: int) -> dict[str, jax.Array]:
  """The paper's metrics of one run on ``num_samples`` fresh samples (dict of [] arrays)."""
  k_rows = settings.num_labels
  batch = data_lib.sample_batch(key, state_run.problem, state_run.kappa, num_samples,
                                settings.num_indices, settings.conditional,
                                num_proposals=settings.num_proposals)
  h = features(settings, state_run, batch.x)
  norm_w = state_run.normalize_head
  w = head_rows(state_run.params, norm_w)
  centers = state_run.problem.centers
  v_of_rows = centers[jnp.arange(k_rows) % settings.num_classes]
  y = target_labels(settings, batch)
  model_ce = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
      logits_fn(settings, h, state_run.params, norm_w), y))
  out = {
      "r2_z": eval_lib.heldout_r2(h, batch.z, True),
      "r2_z_no_intercept": eval_lib.heldout_r2(h, batch.z, False),
      "sv_mae_z": eval_lib.singular_value_mae(h, batch.z, 1.0 / state_run.kappa),
      "r2_x": eval_lib.heldout_r2(batch.x, batch.z, True),
      "r2_x_no_intercept": eval_lib.heldout_r2(batch.x, batch.z, False),
      "r2_head": eval_lib.heldout_r2(w, v_of_rows, True),
      "r2_head_no_intercept": eval_lib.heldout_r2(w, v_of_rows, False),
      "sv_mae_head": eval_lib.singular_value_mae(w, v_of_rows, jnp.float32(1.0)),
      "model_ce": model_ce,
      "bayes_ce": eval_lib.bayes_cross_entropy(batch.z, y, centers, state_run.kappa,
                                               k_rows),
      "temperature": jnp.exp(state_run.params["log_temperature"]),
      "rejected": batch.rejected.astype(jnp.float32),
  }
  if k_rows >= 2 * settings.num_classes:
    out["head_cosine"] = eval_lib.same_class_cosine(w, settings.num_classes)
  return out


def evaluate(settings: Settings, seed_index: np.ndarray, state: TrainState, key: jax.Array,
             num_samples: int = 8192) -> dict[str, jax.Array]:
  """The paper's evaluation of every run on ``num_samples`` fresh samples.

  The same evaluation key for every run of a seed, so variants are compared on paired
  samples. Returns a dict of ``[R]`` arrays (see :func:`evaluate_run`).
  """
  keys = blocks.member_keys(key, seed_index.shape[0], seed_index)
  return jax.vmap(lambda s, k: evaluate_run(settings, s, k, num_samples))(state, keys)


# ---------------------------------------------------------------------------------------
# The same encoder and head trained on a user's data set (``train.run(config, dataset=)``).


class FitState(NamedTuple):
  """One seed's state on a user's data (a leading seed axis in :func:`make_fit_kernel`)."""
  params: Any         # {"encoder", "head": [K, d], "log_temperature": []}
  batch_stats: Any
  opt_state: Any
  step: jax.Array     # [] int32, optimiser steps taken


def init_fit(settings: Settings, key: jax.Array) -> FitState:
  """One seed's encoder, head and Adam state from ``key``."""
  k_model, k_head = jax.random.split(key)
  params, batch_stats = init_params(settings, k_model, k_head)
  return FitState(params, batch_stats, optimizer(settings).init(params),
                  jnp.zeros((), jnp.int32))


def fit_step(update: Callable[..., blocks.Update], normalize_head: bool, state: FitState,
             batch: dict[str, jax.Array]) -> tuple[FitState, dict[str, jax.Array]]:
  """One Adam step of one seed on ``batch = {"x": [B, p], "y": [B]}`` (rows of W put back
  on the sphere first when ``normalize_head``, as in :func:`train_step_run`)."""
  params = {**state.params, "head": head_rows(state.params, normalize_head)}
  out = update(params, state.opt_state, state.batch_stats, batch["x"], batch["y"],
               normalize_head)
  batch_stats, _ = out.aux
  return FitState(out.params, batch_stats, out.opt_state, state.step + 1), {"loss": out.loss}


def make_fit_kernel(settings: Settings, num_seeds: int,
                    normalize_head: bool = False) -> contract.TrainKernel:
  """The train kernel on a user's data: ``num_seeds`` initialisations vmapped.

  ``train_step(state, batch)`` takes ``{"x": [B, k, p], "y": [B, k]}`` (``k =
  steps_per_call`` minibatches; every seed sees the same ones) and runs ``k`` Adam steps
  of every seed as one scan. Extras: ``features(state_run, x) -> [n, d]`` and
  ``evaluate(state, x, y, z=None) -> dict of [S] arrays`` (:func:`evaluate_fit`).
  """
  settings = validate_settings(settings)
  update = blocks.gradient_step(functools.partial(cross_entropy, settings=settings),
                                optimizer(settings), has_aux=True)
  step = blocks.scan_steps(functools.partial(fit_step, update, bool(normalize_head)),
                           settings.steps_per_call, batch_axis=1)
  init = blocks.vmap_init(functools.partial(init_fit, settings), int(num_seeds))
  return contract.train_kernel(
      init, blocks.vmap_members(step, rules={"loss": ("mean", "max")},
                                sequential=settings.runs_in_sequence),
      features=functools.partial(features, settings),
      evaluate=functools.partial(evaluate_fit, settings, bool(normalize_head)))


def evaluate_fit(settings: Settings, normalize_head: bool, state: FitState, x: jax.Array,
                 y: jax.Array | None, z: jax.Array | None = None) -> dict[str, jax.Array]:
  """Every seed's scores on held-out samples ``x [n, p]`` (dict of ``[S]`` arrays).

  With labels ``y [n]``, ``model_ce`` and ``accuracy`` of the classifier (None for DIET,
  whose labels are the training samples' indices); with latents ``z [n, d]`` also the
  paper's linear identifiability of z from f(x) (``r2_z``, ``r2_z_no_intercept``: a
  linear map fitted on the first half of the samples, R^2 on the second).
  """

  def one(state_run: FitState) -> dict[str, jax.Array]:
    h = features(settings, state_run, x)
    out = {}
    if y is not None:
      logits = logits_fn(settings, h, state_run.params, normalize_head)
      out["model_ce"] = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))
      out["accuracy"] = jnp.mean(jnp.argmax(logits, -1) == y)
    if z is not None:
      out["r2_z"] = eval_lib.heldout_r2(h, z, True)
      out["r2_z_no_intercept"] = eval_lib.heldout_r2(h, z, False)
    return out

  return jax.vmap(one)(state)
