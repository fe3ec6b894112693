"""AERCA's pure kernels: the encoder/decoder forward pass, the loss, and the training kernel.

Notation (one series x [T, p], lag K):

* encoder (GVAR Psi): y_t = sum_k Psi_k(x_{t-k}) x_{t-k}; residuals s_t = y_t - x_t for
  t >= K (the official code's sign: minus the paper's exogenous u_t = x_t - f(x_<t)).
* decoder: for t >= 2K, x^_t = sum_k Phi_k(s_{t-k}) s_{t-k} + s_t
  + sum_k Phi'_k(x_{t-K-k}) x_{t-K-k}. It shapes the encoder's gradients in training and
  is never used for the graph or the root causes.
* loss: MSE(x^, x) + l_en R(Psi) + l_de [R(Phi) + R(Phi')] + g_en S(Psi)
  + g_de [S(Phi) + S(Phi')] + beta KL(s), see :class:`LossSettings`.

The training kernel composes the core blocks: one seed's epoch is ``blocks.scan_steps``
over the training series of ``blocks.gradient_step`` (one Adam step per series, in order,
as the official code), then the summed validation loss into ``blocks.keep_best`` (best
parameters and early stopping with ``patience``); ``blocks.vmap_members`` trains
``num_seeds`` seeds in one program (one after another on CPU devices of one core each,
elsewhere batched under ``vmap``: ``TrainSettings.seeds_in_sequence``);
``blocks.scan_steps`` runs ``epochs_per_step`` epochs per ``train_step``. **An aerca step
is one epoch: one Adam step per training series**, so the loop's ``num_steps`` is the
number of epochs and its ``steps_per_call`` is ``epochs_per_step``. Once every seed has
stopped an epoch is a no-op (``lax.cond`` outside the seeds; the epoch counter stands
still), so a loop of ``max_epochs`` steps costs only what the seeds actually train.

Devices: under ``train_loop.run``'s mesh of several devices, S seeds (a multiple of the
device count) run S / devices per device (``vmap_members(split=True)``; one after another
on each device when in sequence); otherwise each device computes a share of every series
(:func:`split_series_loss`, a ``shard_map``; with the paper's time-axis smoothness XLA's
partitioner splits the windows instead: ``distributed.split`` in :func:`forward`). On one
device both are no-ops.
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

from jaxlib_papers.aerca.models import Networks
from jaxlib_papers.core import blocks, contract, distributed

KL_FORMS = ("code", "paper")
SMOOTH_AXES = ("lag", "time")


class LossSettings(NamedTuple):
  lambda_encoder: float = 0.5   # lambda_en: elastic-net weight on Psi
  lambda_decoder: float = 0.5   # lambda_de: elastic-net weight on Phi and Phi'
  gamma_encoder: float = 0.5    # gamma_en: smoothness weight on Psi
  gamma_decoder: float = 0.5    # gamma_de: smoothness weight on Phi and Phi'
  beta: float = 0.5             # beta: weight of the Gaussian-prior (KL) term on s
  alpha: float = 0.5            # elastic-net mix: alpha L1 + (1 - alpha) L2 over the lags
  kl_form: str = "code"         # "code": tr S + mu'mu - d + log det S; "paper": 1/2 (... - log det)
  smooth_axis: str = "lag"      # "lag" (code): across lag slots; "time" (paper): across t
  decoder: bool = True          # False: encoder-only ablation (loss MSE(s) + R + S on Psi)

  def validate(self) -> LossSettings:
    if self.kl_form not in KL_FORMS:
      raise ValueError(f"kl_form must be one of {KL_FORMS}; got {self.kl_form!r}")
    if self.smooth_axis not in SMOOTH_AXES:
      raise ValueError(f"smooth_axis must be one of {SMOOTH_AXES}; got {self.smooth_axis!r}")
    for name in ("lambda_encoder", "lambda_decoder", "gamma_encoder", "gamma_decoder",
                 "beta"):
      if float(getattr(self, name)) < 0:
        raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")
    if not 0.0 <= float(self.alpha) <= 1.0:
      raise ValueError(f"alpha must be in [0, 1]; got {self.alpha}")
    return self


def lag_windows(x: jax.Array, lag: int) -> jax.Array:
  """x [T, p] -> windows [T - lag, lag, p] with windows[j, k] = x[j + k] (slot 0 oldest).

  One gather (numpy indexing for a numpy x): its gradient is one scatter-add, which XLA
  keeps as an array of its own. The stack of K slices it replaces has a gradient of K
  pads, which XLA:CPU fused into the [N, K, p, p] coefficient gradient and recomputed
  there for every (k, j): 5 % of a training epoch (``seeds/aerca.md``, "Speed").
  """
  index = np.arange(x.shape[0] - lag)[:, None] + np.arange(lag)[None, :]
  return x[index]


def safe_norm(x: jax.Array, axis) -> jax.Array:
  """Euclidean norm with a zero (not NaN) gradient where the norm is 0."""
  sq = jnp.sum(x * x, axis=axis)
  positive = sq > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


def sparsity(coeffs: jax.Array, alpha: float) -> jax.Array:
  """Elastic net over the lag axis: alpha mean ||C_{n,:,i,j}||_1 + (1 - alpha) mean ||.||_2.

  Args:
    coeffs: [N, K, p, p].
  """
  l2 = jnp.mean(safe_norm(coeffs, axis=1))
  l1 = jnp.mean(jnp.sum(jnp.abs(coeffs), axis=1))
  return (1.0 - alpha) * l2 + alpha * l1


def smoothness(coeffs: jax.Array, axis: str) -> jax.Array:
  """Smoothness of generalised coefficients; coeffs [N, K, p, p].

  ``"lag"`` (official code): mean over (n, i, j) of ||C_{n,k+1,i,j} - C_{n,k,i,j}||_2 over
  k (0 when K = 1). ``"time"`` (paper, as GVAR): mean over n of ||C_{n+1} - C_n||_F.
  """
  if axis == "lag":
    if coeffs.shape[1] < 2:
      return jnp.zeros((), coeffs.dtype)
    return jnp.mean(safe_norm(coeffs[:, 1:] - coeffs[:, :-1], axis=1))
  if axis == "time":
    diff = coeffs[1:] - coeffs[:-1]
    return jnp.mean(safe_norm(diff.reshape(diff.shape[0], -1), axis=1))
  raise ValueError(f"smooth_axis must be one of {SMOOTH_AXES}; got {axis!r}")


def _moments(s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Mean [d], jittered unbiased covariance [d, d] and its log-determinant of s [n, d].

  The jitter is 1e-6 cond(Sigma) I as in the official code; cond is computed without a
  gradient (eigenvalue derivatives are undefined at repeated eigenvalues).
  """
  n = s.shape[0]
  mu = jnp.mean(s, axis=0)
  centred = s - mu
  return (mu,) + _jittered(centred.T @ centred / (n - 1))


def _jittered(cov: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(cov + 1e-6 cond(cov) I, its log-determinant); cond without a gradient."""
  eig = jnp.linalg.eigvalsh(jax.lax.stop_gradient(cov))
  cond = eig[-1] / jnp.maximum(eig[0], 1e-9)
  cov = cov + 1e-6 * cond * jnp.eye(cov.shape[0], dtype=cov.dtype)
  _, logdet = jnp.linalg.slogdet(cov)
  return cov, logdet


def _kl(form: str, mu: jax.Array, cov: jax.Array, logdet: jax.Array) -> jax.Array:
  """The KL term of residual moments: ``"code"`` tr S + mu'mu - d + log det S (no lower
  bound; issue #7), ``"paper"`` KL(N(mu, S) || N(0, I))."""
  core = jnp.trace(cov) + mu @ mu - mu.shape[0]
  return core + logdet if form == "code" else 0.5 * (core - logdet)


def kl_code(s: jax.Array) -> jax.Array:
  """Official code's term: tr S + mu'mu - d + log det S (no lower bound; issue #7)."""
  return _kl("code", *_moments(s))


def kl_paper(s: jax.Array) -> jax.Array:
  """KL(N(mu, S) || N(0, I)) = 1/2 (tr S + mu'mu - d - log det S) >= 0."""
  return _kl("paper", *_moments(s))


class Forward(NamedTuple):
  residuals: jax.Array       # [T-K, p] s_t = y_t - x_t for t = K..T-1
  encoder_coeffs: jax.Array  # [T-K, K, p, p] Psi
  recon: jax.Array           # [T-2K, p] x^_t for t = 2K..T-1
  target: jax.Array          # [T-2K, p] x_t for t = 2K..T-1
  decoder_coeffs: jax.Array  # [T-2K, K, p, p] Phi
  prev_coeffs: jax.Array     # [T-2K, K, p, p] Phi'


def encode(nets: Networks, params, x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """x [T, p] -> (residuals s [T-K, p], Psi [T-K, K, p, p]); s[j] belongs to time K + j."""
  lag = nets.lag
  preds, coeffs = nets.apply(params["encoder"], lag_windows(x, lag))
  return preds - x[lag:], coeffs


def forward(nets: Networks, params, x: jax.Array) -> Forward:
  """Encoder and decoder on one series x [T, p] (T > 2K).

  The windows are the series' batch: traced under a mesh of several devices
  (``train_loop.run``), each device computes its share of them
  (``distributed.split``; the loss's sums and the gradient cross devices).
  """
  lag = nets.lag
  x_windows = distributed.split(lag_windows(x, lag))
  preds, psi = nets.apply(params["encoder"], x_windows)
  s = preds - x[lag:]
  s_pred, phi = nets.apply(params["decoder"], distributed.split(lag_windows(s, lag)))
  prev_pred, phi_prev = nets.apply(params["decoder_prev"],
                                   distributed.split(x_windows[:x.shape[0] - 2 * lag]))
  recon = s_pred + s[lag:] + prev_pred
  return Forward(s, psi, recon, x[2 * lag:], phi, phi_prev)


def loss_fn(nets: Networks, settings: LossSettings, params, x: jax.Array
            ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """AERCA's loss of one series x [T, p]; returns (loss [], terms)."""
  chex.assert_rank(x, 2)
  if not settings.decoder:
    s, psi = encode(nets, params, x)
    terms = {"recon": jnp.mean(s * s),
             "sparsity": settings.lambda_encoder * sparsity(psi, settings.alpha),
             "smooth": settings.gamma_encoder * smoothness(psi, settings.smooth_axis),
             "kl": jnp.zeros((), x.dtype)}
    return sum(terms.values()), terms
  out = forward(nets, params, x)
  recon = jnp.mean((out.recon - out.target) ** 2)
  sp = (settings.lambda_encoder * sparsity(out.encoder_coeffs, settings.alpha)
        + settings.lambda_decoder * (sparsity(out.decoder_coeffs, settings.alpha)
                                     + sparsity(out.prev_coeffs, settings.alpha)))
  axis = settings.smooth_axis
  sm = (settings.gamma_encoder * smoothness(out.encoder_coeffs, axis)
        + settings.gamma_decoder * (smoothness(out.decoder_coeffs, axis)
                                    + smoothness(out.prev_coeffs, axis)))
  kl = kl_code(out.residuals) if settings.kl_form == "code" else kl_paper(out.residuals)
  terms = {"recon": recon, "sparsity": sp, "smooth": sm, "kl": settings.beta * kl}
  return recon + sp + sm + settings.beta * kl, terms


def series_loss_value(nets: Networks, settings: LossSettings, params, x: jax.Array
                      ) -> jax.Array:
  """The scalar loss [] of one series x [T, p] (what the Adam step differentiates).

  Traced under a mesh of several devices (``distributed.split_count() > 1``) with the
  lag-axis smoothness, each device computes its own share of the series
  (:func:`split_series_loss`); otherwise :func:`loss_fn`.
  """
  if distributed.split_count() > 1 and settings.smooth_axis == "lag":
    return split_series_loss(nets, settings, params, x)
  return loss_fn(nets, settings, params, x)[0]


def _coeff_sums(coeffs: jax.Array, own: jax.Array) -> jax.Array:
  """[l2, l1, lag smoothness] summed over the windows where ``own`` [n] is true (the sums
  behind :func:`sparsity` and :func:`smoothness` ``"lag"``); coeffs [n, K, p, p]."""
  own = own[:, None, None]
  sums = [jnp.sum(jnp.where(own, safe_norm(coeffs, axis=1), 0.0)),
          jnp.sum(jnp.where(own, jnp.sum(jnp.abs(coeffs), axis=1), 0.0))]
  if coeffs.shape[1] < 2:
    return jnp.stack(sums + [jnp.zeros((), coeffs.dtype)])
  diff = coeffs[:, 1:] - coeffs[:, :-1]
  return jnp.stack(sums + [jnp.sum(jnp.where(own, safe_norm(diff, axis=1), 0.0))])


def split_series_loss(nets: Networks, settings: LossSettings, params, x: jax.Array,
                      axis_name: str = distributed.DATA_AXIS) -> jax.Array:
  """:func:`loss_fn`'s loss [] of one series x [T, p], each device of ``axis_name``
  computing a contiguous share of it (``shard_map``); lag-axis smoothness only.

  The T - 2K reconstruction targets are cut into D equal chunks of c (the last padded and
  masked). A device runs the encoder on the c + K windows its chunk's decoder windows need
  (K of them also another device's: computed twice, counted once), so nothing crosses
  devices in the forward pass but two ``psum`` (the terms' sums with the residuals' sum,
  then the residuals' centred second moment); the backward pass adds one for the
  residuals' mean and one, combined, for the parameters' gradients (JAX's transpose of the
  replicated parameters). Each term is the sum of the devices' masked sums over the global
  count, so the loss equals :func:`loss_fn`'s up to float rounding (tested). The compiled
  epoch holds 6 all-reduces where the partitioner's split of :func:`forward` held 18
  collectives (9 collective-permutes for the windows' halos, 3 all-gathers, 6 all-reduces;
  ``seeds/aerca.md``, "Each device its share of a series"). Traced without a mesh of
  several devices on ``axis_name`` it is :func:`loss_fn`'s loss.
  """
  if settings.smooth_axis != "lag":
    raise ValueError("split_series_loss computes the lag-axis smoothness only; got "
                     f"smooth_axis={settings.smooth_axis!r}")
  devices = distributed.split_count(axis_name)
  if devices == 1:
    return loss_fn(nets, settings, params, x)[0]
  lag, (length, p) = nets.lag, x.shape
  chunk = -(-(length - 2 * lag) // devices)                  # c
  x = jnp.pad(x, ((0, devices * chunk + 2 * lag - length), (0, 0)))
  share = functools.partial(_device_share, nets, settings, length, chunk, axis_name)
  rep = jax.sharding.PartitionSpec()
  totals, mu, cov = jax.shard_map(share, mesh=jax.sharding.get_abstract_mesh(),
                                  in_specs=(rep, rep), out_specs=(rep, rep, rep),
                                  axis_names={axis_name})(params, x)
  return _loss_from_sums(settings, totals, mu, cov, length - lag, length - 2 * lag, p)


def _device_share(nets: Networks, settings: LossSettings, length: int, chunk: int,
                  axis_name: str, params, x: jax.Array):
  """One device's part of :func:`split_series_loss` (inside its ``shard_map``): the
  devices' summed term sums [10] (encoder-only: [4]), the residuals' mean [p] and their
  unbiased covariance [p, p]; x [D c + 2K, p] is the zero-padded series."""
  lag, p = nets.lag, x.shape[1]
  windows, targets = length - lag, length - 2 * lag          # N, M
  devices = jax.lax.axis_size(axis_name)
  d = jax.lax.axis_index(axis_name)
  start = d * chunk
  x_loc = jax.lax.dynamic_slice_in_dim(x, start, chunk + 2 * lag)   # [c + 2K, p]
  x_windows = lag_windows(x_loc, lag)                                # [c + K, K, p]
  preds, psi = nets.apply(params["encoder"], x_windows)
  s = preds - x_loc[lag:]                                            # [c + K, p]
  i = jnp.arange(chunk + lag)
  own = (start + i < windows) & ((i < chunk) | (d == devices - 1))   # counted here
  sums = [_coeff_sums(psi, own)]
  if settings.decoder:
    s_pred, phi = nets.apply(params["decoder"], lag_windows(s, lag))
    prev_pred, phi_prev = nets.apply(params["decoder_prev"], x_windows[:chunk])
    valid = start + jnp.arange(chunk) < targets
    err = s_pred + s[lag:lag + chunk] + prev_pred - x_loc[2 * lag:2 * lag + chunk]
    sums += [jnp.sum(jnp.where(valid[:, None], err * err, 0.0))[None],
             _coeff_sums(phi, valid), _coeff_sums(phi_prev, valid)]
  else:
    sums.append(jnp.sum(jnp.where(own[:, None], s * s, 0.0))[None])
  s_own = jnp.where(own[:, None], s, 0.0)
  total = jax.lax.psum(jnp.concatenate(sums + [jnp.sum(s_own, axis=0)]), axis_name)
  mu = total[-p:] / windows
  centred = jnp.where(own[:, None], s - mu, 0.0)
  cov = jax.lax.psum(centred.T @ centred, axis_name) / (windows - 1)
  return total[:-p], mu, cov


def _loss_from_sums(settings: LossSettings, totals: jax.Array, mu: jax.Array,
                    cov: jax.Array, windows: int, targets: int, p: int) -> jax.Array:
  """:func:`loss_fn`'s loss from :func:`_device_share`'s sums: each mean is its sum over
  the global count (N windows, M targets)."""
  alpha = settings.alpha

  def coeff_terms(sums, count):     # (sparsity, smoothness) of one block, as the means
    sums = sums / (count * p * p)
    return (1.0 - alpha) * sums[0] + alpha * sums[1], sums[2]

  sp_en, sm_en = coeff_terms(totals[:3], windows)
  if not settings.decoder:
    recon = totals[3] / (windows * p)
    return recon + settings.lambda_encoder * sp_en + settings.gamma_encoder * sm_en
  recon = totals[3] / (targets * p)
  sp_de, sm_de = coeff_terms(totals[4:7], targets)
  sp_prev, sm_prev = coeff_terms(totals[7:10], targets)
  sp = settings.lambda_encoder * sp_en + settings.lambda_decoder * (sp_de + sp_prev)
  sm = settings.gamma_encoder * sm_en + settings.gamma_decoder * (sm_de + sm_prev)
  kl = _kl(settings.kl_form, mu, *_jittered(cov))
  return recon + sp + sm + settings.beta * kl


# ------------------------------------------------------------------ training kernel

class TrainSettings(NamedTuple):
  lr: float = 1e-4           # Adam learning rate
  num_seeds: int = 1         # S, seeds trained together (one program)
  patience: int = 20         # epochs without a lower validation loss before a seed stops
  epochs_per_step: int = 1   # epochs per train_step (one lax.scan)
  # The seeds one after another in the program (blocks.vmap_members(sequential=True)),
  # not batched under vmap: 1.17x faster per epoch at 8 seeds over 2 CPU devices of one
  # core each (seeds/aerca.md, "Members one after another"); None: where
  # blocks.members_in_sequence_by_default() says (one core per CPU device).
  seeds_in_sequence: bool | None = None

  def validate(self) -> TrainSettings:
    if (int(self.num_seeds) < 1 or int(self.patience) < 1
        or int(self.epochs_per_step) < 1):
      raise ValueError("num_seeds, patience and epochs_per_step must be >= 1; got "
                       f"{self.num_seeds}, {self.patience}, {self.epochs_per_step}")
    if float(self.lr) <= 0:
      raise ValueError(f"lr must be > 0; got {self.lr}")
    return self


class SeedState(NamedTuple):
  """One seed's training state (``[S]``-stacked in :class:`TrainState`)."""
  params: Any                # current parameters
  opt_state: Any             # optax Adam state
  best: blocks.Best          # keep-best on the summed validation loss: params, value,
                             # bad_epochs (since the last improvement), active
  epochs_trained: jax.Array  # [] int32, epochs trained before stopping


class TrainState(NamedTuple):
  seeds: SeedState           # [S]-stacked
  epoch: jax.Array           # [] int32, epochs run (the slowest seed's count)


class EpochProblem(NamedTuple):
  """What one seed's epoch closes over (its series come in as the step's data)."""
  train_epoch: Callable[..., Any]   # scan_steps of Adam steps over the training series
  loss: Callable[..., jax.Array]    # loss(params, x) -> []
  patience: int


class SeedData(NamedTuple):
  """One seed's series; ``[S]``-stacked when every seed has its own draw."""
  train_series: jax.Array           # [n_train, T, p]
  val_series: jax.Array             # [n_val, T, p]


def init_seed(nets: Networks, tx: optax.GradientTransformation, key: jax.Array
              ) -> SeedState:
  """One seed's state: parameters from ``key``, fresh Adam state, no best yet."""
  params = nets.init(key)
  return SeedState(params, tx.init(params), blocks.init_best(params),
                   jnp.zeros((), jnp.int32))


def series_step(update: Callable[..., blocks.Update], carry, x: jax.Array):
  """One Adam step on series x [T, p]; carry = (params, opt_state)."""
  out = update(carry[0], carry[1], x)
  return (out.params, out.opt_state), {"loss": out.loss}


def seed_epoch(problem: EpochProblem, seed: SeedState, data: SeedData
               ) -> tuple[SeedState, dict[str, jax.Array]]:
  """One epoch of one seed: Adam over its training series, then keep-best on validation.

  A stopped seed (``best.active`` False) keeps its parameters and Adam state.

  Returns:
    (new state, {"loss": summed training loss [], "val_loss": summed validation loss []}).
  """
  active = seed.best.active
  (params, opt_state), train = problem.train_epoch((seed.params, seed.opt_state),
                                                   data.train_series)
  params = blocks.where_tree(active, params, seed.params)
  opt_state = blocks.where_tree(active, opt_state, seed.opt_state)
  val = jnp.sum(jax.vmap(lambda x: problem.loss(params, x))(data.val_series))
  best = blocks.keep_best(seed.best, params, val, problem.patience)
  trained = seed.epochs_trained + active.astype(jnp.int32)
  return SeedState(params, opt_state, best, trained), {"loss": train["loss"], "val_loss": val}


def _epoch(members: blocks.Step, data: SeedData, state: TrainState):
  seeds, metrics = members(state.seeds, data)
  return TrainState(seeds, state.epoch + 1), metrics


def _skip(state: TrainState):
  best = jnp.mean(state.seeds.best.value)
  return state, {"loss": best, "val_loss": best}


def one_epoch(members: blocks.Step, data: SeedData, state: TrainState, batch=None):
  """Every seed's epoch (metrics: means over seeds), or nothing once all have stopped."""
  del batch
  return jax.lax.cond(jnp.any(state.seeds.best.active),
                      functools.partial(_epoch, members, data), _skip, state)


def train_step(epochs: blocks.Step, state: TrainState, batch=None):
  """``epochs_per_step`` epochs; metrics of the last one plus the best and active seeds."""
  state, metrics = epochs(state, batch)
  best = state.seeds.best
  return state, metrics | {"best_val": jnp.mean(best.value),
                           "active_seeds": jnp.sum(best.active).astype(jnp.float32)}


def _check_series(nets: Networks, train_series, val_series, num_seeds: int) -> bool:
  """Checks the shapes; True when every seed has its own series ([S, n, T, p])."""
  per_seed = np.ndim(train_series) == 4
  lead = (num_seeds,) if per_seed else ()
  min_len = 2 * nets.lag + 2
  for name, series in (("train_series", train_series), ("val_series", val_series)):
    shape = np.shape(series)
    if (len(shape) != 3 + per_seed or shape[:len(lead)] != lead
        or shape[-1] != nets.num_vars or shape[-2] < min_len or shape[-3] < 1):
      want = f"[{num_seeds}, " if per_seed else "["
      raise ValueError(f"{name} must be {want}n >= 1, T >= {min_len}, {nets.num_vars}] "
                       f"(train_series {np.shape(train_series)} sets the rank); got {shape}")
  return per_seed


def make_train_kernel(nets: Networks, settings: LossSettings, train_series: jax.Array,
                      val_series: jax.Array, train: TrainSettings) -> contract.TrainKernel:
  """AERCA's training kernel over ``train.num_seeds`` seeds in one program (batch-free steps).

  An aerca step is one epoch: one Adam step per training series. One ``train_step`` runs
  ``train.epochs_per_step`` of them, so run it with ``steps_per_call=epochs_per_step``
  and ``loop.num_steps`` = the number of epochs.

  Args:
    nets: the three GVAR blocks (trained in the layout ``nets.for_training()``).
    settings: loss weights and variants.
    train_series: [n_train, T, p], shared by every seed, or [S, n_train, T, p], one set
      per seed (S = ``train.num_seeds``; the official code's seed draws the data too).
      One Adam step per series per epoch, in order.
    val_series: [n_val, T, p] or [S, n_val, T, p] (as ``train_series``); the summed loss
      over them drives early stopping.
    train: learning rate, seeds, patience, epochs per step.

  Returns:
    ``TrainKernel(init, train_step, extras)``; extras ``encode(params, x)``
    (one seed's residuals and Psi of one series) and ``series_loss(params, x)``.
  """
  settings, train = settings.validate(), train.validate()
  per_seed = _check_series(nets, train_series, val_series, int(train.num_seeds))
  nets = nets.for_training()   # the faster layout (same function and parameters)
  data = SeedData(jnp.asarray(train_series, jnp.float32), jnp.asarray(val_series, jnp.float32))
  tx = optax.adam(float(train.lr))
  loss = functools.partial(series_loss_value, nets, settings)
  update = blocks.gradient_step(loss, tx)
  train_epoch = blocks.scan_steps(functools.partial(series_step, update),
                                  data.train_series.shape[-3], batch_axis=0, metrics="sum")
  problem = EpochProblem(train_epoch, loss, int(train.patience))
  members = blocks.vmap_members(functools.partial(seed_epoch, problem),
                                batch_axis=0 if per_seed else None, split=True,
                                sequential=train.seeds_in_sequence)
  epochs = blocks.scan_steps(functools.partial(one_epoch, members, data),
                             int(train.epochs_per_step), metrics="last")
  init_seeds = blocks.vmap_init(functools.partial(init_seed, nets, tx), int(train.num_seeds))
  init = lambda key: TrainState(init_seeds(key), jnp.zeros((), jnp.int32))
  return contract.train_kernel(init, functools.partial(train_step, epochs),
                               encode=functools.partial(encode, nets),
                               series_loss=functools.partial(loss_fn, nets, settings))
