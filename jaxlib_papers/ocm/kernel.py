"""Pure training kernels (DSM backbone, covariance heads) and the per-method predictors.

Two stages, each a kernel for ``core.train_loop`` (``train.py`` declares them as
``core.stages``):

1. :func:`make_dsm_kernel`: the eps network by denoising score matching (:func:`dsm_loss`).
2. :func:`make_head_kernel`: the OCM head (Rademacher-probe target from one linearisation of
   the frozen eps network) and the SN-DPM / NPR-DPM heads, all on the frozen backbone's last
   features, trained together from the same batch (each head's gradient touches only itself;
   :func:`head_loss`).

The losses are module-level pure functions of settings NamedTuples; the kernels compose
them with the core blocks (``gradient_step``, ``ema_update``, ``scan_steps``). No jit here:
train_loop (or a test) applies it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import blocks, contract, prng
from jaxlib_papers.ocm import covariance, diffusion, models

Array = jax.Array
PyTree = Any


class DSMSettings(NamedTuple):
  """What the DSM loss and step need (static)."""
  model: nn.Module               # backbone, ``apply(params, x, t) -> (eps, features)``
  schedule: diffusion.Schedule
  ema_decay: float = 0.999       # decay of the parameter EMA (what sampling uses)


class HeadSettings(NamedTuple):
  """What the covariance-head loss and step need (static).

  ``param="linear", loss="mse"`` is the paper's || h_phi - sigma_t^2 v * (H_theta v) ||^2
  (and SN's, NPR's squared losses).
  """
  model: nn.Module               # the frozen backbone
  head_model: nn.Module          # ``apply(params, features) -> [B, ...]`` like x (zero init)
  schedule: diffusion.Schedule
  heads: Sequence[str] = covariance.HEADS   # a subset of ("ocm", "sn", "npr")
  num_probes: int = 1            # Rademacher probes per sample for the OCM target
  # The regression targets are noisy (probe noise, eps noise), so the averaged iterate is
  # the better estimate of the minimiser.
  ema_decay: float = 0.999
  param: str = "linear"          # what the heads output (covariance.PARAMETERISATIONS)
  loss: str = "mse"              # covariance.HEAD_LOSSES; all are minimised by E[y | x_t]


class DSMState(NamedTuple):
  step: Array        # [] int32
  params: PyTree     # backbone params
  opt_state: PyTree
  ema_params: PyTree  # EMA of params (what sampling uses)
  key: Array         # typed PRNG key


class HeadState(NamedTuple):
  step: Array        # [] int32
  backbone: PyTree   # frozen eps-network params (never updated)
  time_table: PyTree  # its time features at every t (models.time_feature_table), or None
  params: PyTree     # {head name: head params}
  opt_state: PyTree
  ema_params: PyTree  # EMA of params (what evaluation uses)
  key: Array         # typed PRNG key


# ------------------------------------------------------------------------------ the losses


def _sample_t_noise(schedule: diffusion.Schedule, key: Array, x0: Array):
  k_t, k_noise = jax.random.split(key)
  t = prng.randint(k_t, (x0.shape[0],), 1, schedule.num_steps + 1)
  noise = prng.normal(k_noise, x0.shape, x0.dtype)
  return t, noise


def dsm_loss(params: PyTree, x0: Array, key: Array, settings: DSMSettings) -> Array:
  """E_{t, x0, eps} ||eps_theta(x_t, t) - eps||^2 over a batch x0 [B, ...] (t uniform)."""
  t, noise = _sample_t_noise(settings.schedule, key, x0)
  x_t = diffusion.q_sample(settings.schedule, x0, t, noise)
  eps_hat, _ = settings.model.apply(params, x_t, t)
  return jnp.mean(jnp.square(eps_hat - noise))


def head_loss(params: PyTree, backbone: PyTree, x0: Array, key: Array,
              time_table: PyTree | None = None, *, settings: HeadSettings
              ) -> tuple[Array, dict[str, Array]]:
  """The heads' summed regression loss and each head's (``covariance.head_losses``).

  Each head estimates m = Var[eps | x_t] from its target y: OCM y = 1 + sg[sigma_t^2 v *
  (H_theta v)] with v Rademacher (``num_probes`` per sample, averaged); SN y = eps^2 -
  eps_hat^2; NPR y = (eps - eps_hat)^2.

  Args:
    params: {head name: head params}.
    backbone: the eps-network params (no gradient flows into them).
    x0: [B, ...] data.
    key: a typed PRNG key (t, eps, probes).
    time_table: the backbone's time features at every timestep
      (``models.time_feature_table`` of ``backbone``), or None: rows are gathered at each
      sample's t instead of running the frozen time layers per sample (the same values).
    settings: the heads' settings.

  Returns:
    (loss [], {head name: loss []}).
  """
  schedule, heads = settings.schedule, tuple(settings.heads)
  k_tn, k_probe = jax.random.split(key)
  t, noise = _sample_t_noise(schedule, k_tn, x0)
  x_t = diffusion.q_sample(schedule, x0, t, noise)
  backbone = jax.lax.stop_gradient(backbone)
  if time_table is None:
    backbone_fn = lambda x: settings.model.apply(backbone, x, t)
  else:
    cond = models.gather_time_features(jax.lax.stop_gradient(time_table), t)
    backbone_fn = lambda x: settings.model.apply(backbone, x, t, time_features=cond)
  if "ocm" in heads:
    _, sigma = diffusion.marginal(schedule, t)
    sigma = sigma.reshape((-1,) + (1,) * (x0.ndim - 1))
    probes = covariance.rademacher_probes(k_probe, settings.num_probes, x0.shape, x0.dtype)
    target, eps_hat, features = covariance.ocm_target(backbone_fn, x_t, sigma, probes)
  else:
    target = None
    eps_hat, features = backbone_fn(x_t)
  features = jax.lax.stop_gradient(features)
  preds = {name: settings.head_model.apply(params[name], features) for name in heads}
  losses = covariance.head_losses(preds, eps=noise, eps_hat=eps_hat,
                                  ocm_target_value=target, param=settings.param,
                                  loss=settings.loss)
  return sum(losses.values()), losses


# ----------------------------------------------------------------------------- the kernels


def _check_batch(batch: Array, example_x: Array, steps_per_call: int) -> None:
  item = example_x.shape[1:]
  want = (steps_per_call, *item) if steps_per_call > 1 else item
  if batch.ndim != len(want) + 1 or batch.shape[1:] != want:
    shape = ", ".join(map(str, want))
    raise ValueError(f"batch must be [B, {shape}] ({steps_per_call} step(s) per call), got "
                     f"{batch.shape}")
  chex.assert_type(batch, float)


def _steps(step: blocks.Step, example_x: Array, steps_per_call: int) -> blocks.Step:
  """``train_step`` of ``steps_per_call`` steps over a [B, steps_per_call, ...] batch (a
  [B, ...] batch for one step).

  The step axis is second so the leading (sharded) axis stays the global batch; metrics
  are averaged over the steps.
  """
  steps_per_call = int(steps_per_call)
  if steps_per_call < 1:
    raise ValueError(f"steps_per_call must be >= 1, got {steps_per_call}")
  multi = step if steps_per_call == 1 else blocks.scan_steps(step, steps_per_call,
                                                             batch_axis=1)

  def train_step(state: PyTree, batch: Array) -> tuple[PyTree, dict[str, Array]]:
    _check_batch(batch, example_x, steps_per_call)
    return multi(state, batch)

  return train_step


def _init_key(key: Array) -> Array:
  """An RBG key derived from ``key`` for parameter initialisation.

  Flax's initialisers under a threefry key unroll one threefry hash per parameter, which
  makes the jitted ``init`` of a UNet take 4x longer to compile on CPU than with XLA's
  RngBitGenerator; initial values only need to be random and reproducible.
  """
  return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl="rbg")


def _dsm_init(key: Array, settings: DSMSettings, optimizer: optax.GradientTransformation,
              example_x: Array) -> DSMState:
  k_init, k_state = jax.random.split(key)
  params = settings.model.init(_init_key(k_init), example_x,
                               jnp.ones(example_x.shape[:1], jnp.int32))
  return DSMState(jnp.zeros((), jnp.int32), params, optimizer.init(params), params, k_state)


def _dsm_step(state: DSMState, batch: Array, update: Callable[..., blocks.Update],
              ema_decay: float) -> tuple[DSMState, dict[str, Array]]:
  key, sub = jax.random.split(state.key)
  new = update(state.params, state.opt_state, batch, sub)
  ema = blocks.ema_update(state.ema_params, new.params, ema_decay)
  return (DSMState(state.step + 1, new.params, new.opt_state, ema, key),
          {"loss": new.loss, "grad_norm": optax.tree.norm(new.grads)})


def make_dsm_kernel(model: nn.Module, schedule: diffusion.Schedule,
                    optimizer: optax.GradientTransformation, example_x: Array, *,
                    ema_decay: float = 0.999, steps_per_call: int = 1
                    ) -> contract.TrainKernel:
  """The eps-prediction (DSM) kernel: one ``blocks.gradient_step`` on :func:`dsm_loss`.

  ``train_step(state, batch)`` takes x0 [B, ...] (``steps_per_call=1``) or
  [B, steps_per_call, ...] (a ``blocks.scan_steps`` of that many steps).

  Args:
    model: a backbone, ``apply(params, x, t) -> (eps, features)``.
    example_x: [B, ...] an input of the data's shape (for init).
    ema_decay: decay of the parameter EMA.
    steps_per_call: optimiser steps per ``train_step`` call.
  """
  if not 0.0 <= ema_decay < 1.0:
    raise ValueError(f"ema_decay must be in [0, 1), got {ema_decay}")
  settings = DSMSettings(model, schedule, ema_decay)
  update = blocks.gradient_step(functools.partial(dsm_loss, settings=settings), optimizer)
  init = functools.partial(_dsm_init, settings=settings, optimizer=optimizer,
                           example_x=example_x)
  step = functools.partial(_dsm_step, update=update, ema_decay=ema_decay)
  return contract.train_kernel(init, _steps(step, example_x, steps_per_call))


def check_head_settings(settings: HeadSettings) -> None:
  """Raises a ValueError naming the bad field of ``settings``."""
  if settings.param not in covariance.PARAMETERISATIONS:
    raise ValueError(f"param must be one of {covariance.PARAMETERISATIONS}, got "
                     f"{settings.param!r}")
  if settings.loss not in covariance.HEAD_LOSSES:
    raise ValueError(f"loss must be one of {covariance.HEAD_LOSSES}, got {settings.loss!r}")
  if settings.loss != "mse" and settings.param == "linear":
    raise ValueError(f"loss={settings.loss!r} needs a positive parameterisation (param "
                     "'exp' or 'softplus')")
  if not 0.0 <= settings.ema_decay < 1.0:
    raise ValueError(f"ema_decay must be in [0, 1), got {settings.ema_decay}")
  heads = tuple(settings.heads)
  if not heads or any(h not in covariance.HEADS for h in heads):
    raise ValueError(f"heads must be a non-empty subset of {covariance.HEADS}, got {heads}")
  if settings.num_probes < 1:
    raise ValueError(f"num_probes must be >= 1, got {settings.num_probes}")


def _head_init(key: Array, settings: HeadSettings, optimizer: optax.GradientTransformation,
               example_x: Array, backbone_params: PyTree) -> HeadState:
  heads = tuple(settings.heads)
  keys = jax.random.split(key, len(heads) + 1)
  t = jnp.ones(example_x.shape[:1], jnp.int32)
  _, features = settings.model.apply(backbone_params, example_x, t)
  params = {name: settings.head_model.init(_init_key(k), features)
            for name, k in zip(heads, keys[1:])}
  table = models.time_feature_table(settings.model, backbone_params,
                                    settings.schedule.num_steps)
  return HeadState(jnp.zeros((), jnp.int32), backbone_params, table, params,
                   optimizer.init(params), params, keys[0])


def _head_step(state: HeadState, batch: Array, update: Callable[..., blocks.Update],
               ema_decay: float) -> tuple[HeadState, dict[str, Array]]:
  key, sub = jax.random.split(state.key)
  new = update(state.params, state.opt_state, state.backbone, batch, sub, state.time_table)
  ema = blocks.ema_update(state.ema_params, new.params, ema_decay)
  metrics = {"loss": new.loss, **{f"loss_{k}": v for k, v in new.aux.items()}}
  return (HeadState(state.step + 1, state.backbone, state.time_table, new.params,
                    new.opt_state, ema, key),
          metrics)


def make_head_kernel(settings: HeadSettings, optimizer: optax.GradientTransformation,
                     example_x: Array, backbone_params: PyTree, *,
                     steps_per_call: int = 1) -> contract.TrainKernel:
  """Trains the covariance heads on the frozen backbone (:func:`head_loss`).

  Args:
    settings: the heads, their targets and losses (:class:`HeadSettings`).
    optimizer: the heads' optimiser.
    example_x: [B, ...] an input of the data's shape (for init).
    backbone_params: the trained (EMA) eps-network params (in the state, never updated).
    steps_per_call: optimiser steps per ``train_step`` call (as :func:`make_dsm_kernel`).
  """
  check_head_settings(settings)
  update = blocks.gradient_step(functools.partial(head_loss, settings=settings), optimizer,
                                has_aux=True)
  init = functools.partial(_head_init, settings=settings, optimizer=optimizer,
                           example_x=example_x, backbone_params=backbone_params)
  step = functools.partial(_head_step, update=update, ema_decay=settings.ema_decay)
  return contract.train_kernel(init, _steps(step, example_x, steps_per_call))


# ----------------------------------------------------------------------------- predictors


def analytic_gamma(model: nn.Module, params: PyTree, schedule: diffusion.Schedule,
                   x0: Array, key: Array, timesteps: np.ndarray) -> Array:
  """Analytic-DPM's Gamma_t = E ||eps_hat(x_t)||^2 / d at each of ``timesteps``.

  Args:
    x0: [M, ...] data for the Monte Carlo estimate.
    timesteps: int [T].

  Returns:
    A table [N + 1] holding Gamma_t at ``timesteps`` and NaN elsewhere (so a predictor that
    reads an un-estimated t fails loudly).
  """
  timesteps = jnp.asarray(timesteps)
  keys = jax.random.split(key, timesteps.shape[0])

  def one(inputs):
    t, k = inputs
    tb = jnp.full((x0.shape[0],), t)
    x_t = diffusion.q_sample(schedule, x0, tb, prng.normal(k, x0.shape, x0.dtype))
    eps_hat, _ = model.apply(params, x_t, tb[:1])  # t shared: embedded once
    return jnp.mean(jnp.square(eps_hat))

  values = jax.lax.map(one, (timesteps, keys))
  table = jnp.full((schedule.num_steps + 1,), jnp.nan, values.dtype)
  return table.at[timesteps].set(values)


class Methods(NamedTuple):
  """Everything the predictors need; fields may be None when a method is not used."""
  model: nn.Module
  backbone: PyTree
  head_model: nn.Module | None = None
  head_params: PyTree | None = None      # {head name: params}
  gamma: Array | None = None             # [N + 1] Analytic-DPM table
  oracle: Any = None                     # gmm.GMMOracle for the "exact" row
  max_var: float = 1.0
  head_param: str = "linear"             # what the heads output (covariance.PARAMETERISATIONS)


def eps_variance_fn(methods: Methods, method: str, schedule: diffusion.Schedule
                    ) -> Callable[[Array, Array], tuple[Array, Array]]:
  """(x_t [B, ...], t scalar) -> (eps_hat, Var[eps | x_t] estimate) of a learned method."""

  def fn(x_t: Array, t: Array):
    tb = jnp.full((1,), t)  # t shared by the batch: the backbone embeds it once
    if method == "jacobian":  # h_theta = -sigma_t diag J_eps: OCM's target without probes
      diag, eps_hat, _ = covariance.jacobian_diagonal(
          lambda x: methods.model.apply(methods.backbone, x, tb), x_t)
      _, sigma = diffusion.marginal(schedule, t)
      return eps_hat, covariance.eps_variance("jacobian", head=-sigma * diag)
    eps_hat, features = methods.model.apply(methods.backbone, x_t, tb)
    if method in covariance.HEADS:
      head = methods.head_model.apply(methods.head_params[method], features)
      return eps_hat, covariance.eps_variance(method, eps_hat=eps_hat, head=head,
                                              param=methods.head_param)
    if method == "analytic":
      return eps_hat, covariance.eps_variance("analytic", gamma=methods.gamma[t])
    if method == "exact":
      _, h_star = methods.oracle.eps_and_h(x_t, t)
      return eps_hat, covariance.eps_variance("exact", head=h_star)
    raise ValueError(f"unknown learned method {method!r}")

  return fn


def make_predictor(methods: Methods, method: str, schedule: diffusion.Schedule
                   ) -> diffusion.Predictor:
  """predict(x_t, t) -> (eps_hat, x0_cov) for any of covariance.METHODS."""
  if method not in covariance.METHODS:
    raise ValueError(f"method must be one of {covariance.METHODS}, got {method!r}")
  abar_table = jnp.asarray(schedule.abar)

  if method in ("beta_tilde", "beta"):
    def predict(x_t, t):
      tb = jnp.full((1,), t)  # t shared by the batch: the backbone embeds it once
      eps_hat, _ = methods.model.apply(methods.backbone, x_t, tb)
      return eps_hat, covariance.x0_covariance(method, abar_table[t])
    return predict

  var_fn = eps_variance_fn(methods, method, schedule)

  def predict(x_t, t):
    eps_hat, eps_var = var_fn(x_t, t)
    return eps_hat, covariance.x0_covariance(method, abar_table[t], eps_var=eps_var,
                                             max_var=methods.max_var)
  return predict
