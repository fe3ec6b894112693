"""Pure training kernels (DSM backbone, covariance heads) and the per-method predictors.

Two stages, each a kernel for ``core.train_loop``:

1. :func:`make_dsm_kernel`: the eps network by denoising score matching.
2. :func:`make_head_kernel`: the OCM head (Rademacher-probe target from one linearisation of
   the frozen eps network) and the SN-DPM / NPR-DPM heads, all on the frozen backbone's last
   features, trained together from the same batch (each head's gradient touches only itself).

No jit here: train_loop (or a test) applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import contract, prng
from jaxlib_papers.ocm import covariance, diffusion

Array = jax.Array
PyTree = Any


class DSMState(NamedTuple):
  step: Array        # [] int32
  params: PyTree     # backbone params
  opt_state: PyTree
  ema_params: PyTree  # EMA of params (what sampling uses)
  key: Array         # typed PRNG key


class HeadState(NamedTuple):
  step: Array        # [] int32
  backbone: PyTree   # frozen eps-network params (never updated)
  params: PyTree     # {head name: head params}
  opt_state: PyTree
  ema_params: PyTree  # EMA of params (what evaluation uses)
  key: Array         # typed PRNG key


def _check_batch(batch: Array, example_x: Array) -> None:
  item = example_x.shape[1:]
  if batch.shape[-len(item):] != item or batch.ndim not in (len(item) + 1, len(item) + 2):
    raise ValueError(
        f"batch must be [B, {', '.join(map(str, item))}] or [B, chunk, "
        f"{', '.join(map(str, item))}], got {batch.shape}")
  chex.assert_type(batch, float)


def _chunked(single_step, example_x: Array):
  """train_step over a [B, ...] batch, or a lax.scan of steps over a [B, chunk, ...] batch.

  The chunk axis is second so the leading (sharded) axis stays the global batch; metrics
  are averaged over the chunk.
  """

  def train_step(state, batch):
    _check_batch(batch, example_x)
    if batch.ndim == example_x.ndim:
      return single_step(state, batch)
    state, metrics = jax.lax.scan(single_step, state, jnp.swapaxes(batch, 0, 1))
    return state, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)

  return train_step


def _init_key(key: Array) -> Array:
  """An RBG key derived from ``key`` for parameter initialisation.

  Flax's initialisers under a threefry key unroll one threefry hash per parameter, which
  makes the jitted ``init`` of a UNet take 4x longer to compile on CPU than with XLA's
  RngBitGenerator; initial values only need to be random and reproducible.
  """
  return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl="rbg")


def _sample_t_noise(schedule: diffusion.Schedule, key: Array, x0: Array):
  k_t, k_noise = jax.random.split(key)
  t = prng.randint(k_t, (x0.shape[0],), 1, schedule.num_steps + 1)
  noise = prng.normal(k_noise, x0.shape, x0.dtype)
  return t, noise


def make_dsm_kernel(model: nn.Module, schedule: diffusion.Schedule,
                    optimizer: optax.GradientTransformation, example_x: Array, *,
                    ema_decay: float = 0.999) -> contract.TrainKernel:
  """The eps-prediction (DSM) kernel: loss E_{t, x0, eps} ||eps_theta(x_t, t) - eps||^2.

  ``train_step(state, batch)`` takes x0 [B, ...] (one step) or [B, chunk, ...] (a scan of
  ``chunk`` steps).

  Args:
    model: a backbone, ``apply(params, x, t) -> (eps, features)``.
    example_x: [B, ...] an input of the data's shape (for init).
    ema_decay: decay of the parameter EMA.
  """
  if not 0.0 <= ema_decay < 1.0:
    raise ValueError(f"ema_decay must be in [0, 1), got {ema_decay}")

  def init(key: Array) -> DSMState:
    k_init, k_state = jax.random.split(key)
    params = model.init(_init_key(k_init), example_x, jnp.ones(example_x.shape[:1], jnp.int32))
    return DSMState(jnp.zeros((), jnp.int32), params, optimizer.init(params), params, k_state)

  def loss_fn(params: PyTree, x0: Array, key: Array) -> Array:
    t, noise = _sample_t_noise(schedule, key, x0)
    x_t = diffusion.q_sample(schedule, x0, t, noise)
    eps_hat, _ = model.apply(params, x_t, t)
    return jnp.mean(jnp.square(eps_hat - noise))

  def train_step(state: DSMState, batch: Array) -> tuple[DSMState, dict[str, Array]]:
    key, sub = jax.random.split(state.key)
    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch, sub)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    ema = optax.incremental_update(params, state.ema_params, 1.0 - ema_decay)
    return (DSMState(state.step + 1, params, opt_state, ema, key),
            {"loss": loss, "grad_norm": optax.tree.norm(grads)})

  return contract.train_kernel(init, _chunked(train_step, example_x), loss_fn=loss_fn)


def make_head_kernel(model: nn.Module, head_model: nn.Module, schedule: diffusion.Schedule,
                     optimizer: optax.GradientTransformation, example_x: Array,
                     backbone_params: PyTree, *, heads: Sequence[str] = covariance.HEADS,
                     num_probes: int = 1, ema_decay: float = 0.999, param: str = "linear",
                     loss: str = "mse") -> contract.TrainKernel:
  """Trains the covariance heads on the frozen backbone.

  Each head estimates m = Var[eps | x_t] from the target y (see
  :func:`covariance.head_losses`): OCM y = 1 + sg[sigma_t^2 v * (H_theta v)] with v
  Rademacher (``num_probes`` per sample, averaged); SN y = eps^2 - eps_hat^2; NPR
  y = (eps - eps_hat)^2. ``param="linear", loss="mse"`` is the paper's
  || h_phi - sigma_t^2 v * (H_theta v) ||^2 (and SN's, NPR's squared losses).

  Args:
    model: the backbone (its params are frozen: they live in the state but get no update).
    head_model: ``apply(params, features) -> [B, ...]`` like x (zero-init output).
    backbone_params: the trained (EMA) eps-network params.
    heads: which heads to train, a subset of ("ocm", "sn", "npr").
    num_probes: Rademacher probes per sample for the OCM target.
    ema_decay: decay of the heads' parameter EMA. The regression targets are noisy (probe
      noise, eps noise), so the averaged iterate is the better estimate of the minimiser.
    param: what the heads output, one of ``covariance.PARAMETERISATIONS``.
    loss: "mse" or "nll" (``covariance.HEAD_LOSSES``); both are minimised by E[y | x_t].
  """
  if param not in covariance.PARAMETERISATIONS:
    raise ValueError(f"param must be one of {covariance.PARAMETERISATIONS}, got {param!r}")
  if loss not in covariance.HEAD_LOSSES:
    raise ValueError(f"loss must be one of {covariance.HEAD_LOSSES}, got {loss!r}")
  if loss != "mse" and param == "linear":
    raise ValueError(f"loss={loss!r} needs a positive parameterisation (param 'exp' or "
                     "'softplus')")
  if not 0.0 <= ema_decay < 1.0:
    raise ValueError(f"ema_decay must be in [0, 1), got {ema_decay}")
  heads = tuple(heads)
  if not heads or any(h not in covariance.HEADS for h in heads):
    raise ValueError(f"heads must be a non-empty subset of {covariance.HEADS}, got {heads}")
  if num_probes < 1:
    raise ValueError(f"num_probes must be >= 1, got {num_probes}")

  def init(key: Array) -> HeadState:
    keys = jax.random.split(key, len(heads) + 1)
    t = jnp.ones(example_x.shape[:1], jnp.int32)
    _, features = model.apply(backbone_params, example_x, t)
    params = {name: head_model.init(_init_key(k), features) for name, k in zip(heads, keys[1:])}
    return HeadState(jnp.zeros((), jnp.int32), backbone_params, params,
                     optimizer.init(params), params, keys[0])

  def loss_fn(params: PyTree, backbone: PyTree, x0: Array, key: Array
              ) -> tuple[Array, dict[str, Array]]:
    k_tn, k_probe = jax.random.split(key)
    t, noise = _sample_t_noise(schedule, k_tn, x0)
    x_t = diffusion.q_sample(schedule, x0, t, noise)
    backbone = jax.lax.stop_gradient(backbone)
    backbone_fn = lambda x: model.apply(backbone, x, t)
    if "ocm" in heads:
      _, sigma = diffusion.marginal(schedule, t)
      sigma = sigma.reshape((-1,) + (1,) * (x0.ndim - 1))
      probes = covariance.rademacher_probes(k_probe, num_probes, x0.shape, x0.dtype)
      target, eps_hat, features = covariance.ocm_target(backbone_fn, x_t, sigma, probes)
    else:
      target = None
      eps_hat, features = backbone_fn(x_t)
    features = jax.lax.stop_gradient(features)
    preds = {name: head_model.apply(params[name], features) for name in heads}
    losses = covariance.head_losses(preds, eps=noise, eps_hat=eps_hat,
                                    ocm_target_value=target, param=param, loss=loss)
    return sum(losses.values()), losses

  def train_step(state: HeadState, batch: Array) -> tuple[HeadState, dict[str, Array]]:
    key, sub = jax.random.split(state.key)
    (loss, losses), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, state.backbone, batch, sub)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    ema = optax.incremental_update(params, state.ema_params, 1.0 - ema_decay)
    metrics = {"loss": loss, **{f"loss_{k}": v for k, v in losses.items()}}
    return HeadState(state.step + 1, state.backbone, params, opt_state, ema, key), metrics

  return contract.train_kernel(init, _chunked(train_step, example_x), loss_fn=loss_fn)


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
    eps_hat, _ = model.apply(params, x_t, tb)
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
    tb = jnp.full((x_t.shape[0],), t)
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
      tb = jnp.full((x_t.shape[0],), t)
      eps_hat, _ = methods.model.apply(methods.backbone, x_t, tb)
      return eps_hat, covariance.x0_covariance(method, abar_table[t])
    return predict

  var_fn = eps_variance_fn(methods, method, schedule)

  def predict(x_t, t):
    eps_hat, eps_var = var_fn(x_t, t)
    return eps_hat, covariance.x0_covariance(method, abar_table[t], eps_var=eps_var,
                                             max_var=methods.max_var)
  return predict
