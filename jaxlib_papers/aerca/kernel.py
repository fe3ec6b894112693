"""AERCA's pure kernels: the encoder/decoder forward pass, the loss, and the training kernel.

Notation (one series x [T, p], lag K):

* encoder (GVAR Psi): y_t = sum_k Psi_k(x_{t-k}) x_{t-k}; residuals s_t = y_t - x_t for
  t >= K (the official code's sign: minus the paper's exogenous u_t = x_t - f(x_<t)).
* decoder: for t >= 2K, x^_t = sum_k Phi_k(s_{t-k}) s_{t-k} + s_t
  + sum_k Phi'_k(x_{t-K-k}) x_{t-K-k}. It shapes the encoder's gradients in training and
  is never used for the graph or the root causes.
* loss: MSE(x^, x) + l_en R(Psi) + l_de [R(Phi) + R(Phi')] + g_en S(Psi)
  + g_de [S(Phi) + S(Phi')] + beta KL(s), see :class:`LossSettings`.

The training kernel trains ``num_seeds`` seeds at once (``jax.vmap``); one
``train_step`` runs ``epochs_per_step`` epochs, each one ``lax.scan`` over the training
series (one Adam step per series, as the official code), then the summed validation loss,
best-so-far parameters and early stopping (patience) per seed. Once every seed has stopped
the step is a no-op (``lax.cond`` outside the vmap), so a loop of ``max_epochs`` steps
costs only what the seeds actually train.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from jaxlib_papers.aerca.models import Networks
from jaxlib_papers.core import contract

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
  """x [T, p] -> windows [T - lag, lag, p] with windows[j, k] = x[j + k] (slot 0 oldest)."""
  length = x.shape[0]
  return jnp.stack([x[k:length - lag + k] for k in range(lag)], axis=1)


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
  n, d = s.shape
  mu = jnp.mean(s, axis=0)
  centred = s - mu
  cov = centred.T @ centred / (n - 1)
  eig = jnp.linalg.eigvalsh(jax.lax.stop_gradient(cov))
  cond = eig[-1] / jnp.maximum(eig[0], 1e-9)
  cov = cov + 1e-6 * cond * jnp.eye(d, dtype=s.dtype)
  _, logdet = jnp.linalg.slogdet(cov)
  return mu, cov, logdet


def kl_code(s: jax.Array) -> jax.Array:
  """Official code's term: tr S + mu'mu - d + log det S (no lower bound; issue #7)."""
  mu, cov, logdet = _moments(s)
  return jnp.trace(cov) + mu @ mu - s.shape[1] + logdet


def kl_paper(s: jax.Array) -> jax.Array:
  """KL(N(mu, S) || N(0, I)) = 1/2 (tr S + mu'mu - d - log det S) >= 0."""
  mu, cov, logdet = _moments(s)
  return 0.5 * (jnp.trace(cov) + mu @ mu - s.shape[1] - logdet)


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
  """Encoder and decoder on one series x [T, p] (T > 2K)."""
  lag = nets.lag
  x_windows = lag_windows(x, lag)
  preds, psi = nets.apply(params["encoder"], x_windows)
  s = preds - x[lag:]
  s_pred, phi = nets.apply(params["decoder"], lag_windows(s, lag))
  prev_pred, phi_prev = nets.apply(params["decoder_prev"], x_windows[:x.shape[0] - 2 * lag])
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


class TrainState(NamedTuple):
  params: Any              # [S]-stacked pytree, current parameters of each seed
  opt_state: Any           # [S]-stacked optax Adam state
  best_params: Any         # [S]-stacked pytree, parameters at the best validation loss
  best_val: jax.Array      # [S] float32, best summed validation loss so far
  bad_epochs: jax.Array    # [S] int32, epochs since the last improvement
  active: jax.Array        # [S] bool, still training (not stopped early)
  epoch: jax.Array         # [] int32, epochs run (the slowest seed's count)
  epochs_trained: jax.Array  # [S] int32, epochs each seed trained before stopping


def make_train_kernel(nets: Networks, settings: LossSettings, train_series: jax.Array,
                      val_series: jax.Array, *, lr: float, num_seeds: int, patience: int,
                      epochs_per_step: int = 1) -> contract.TrainKernel:
  """AERCA's training kernel over ``num_seeds`` vmapped seeds (batch-free steps).

  Args:
    nets: the three GVAR blocks.
    settings: loss weights and variants.
    train_series: [n_train, T, p]; one Adam step per series per epoch, in order.
    val_series: [n_val, T, p]; the summed loss over them drives early stopping.
    lr: Adam learning rate.
    num_seeds: S, seeds trained together.
    patience: stop a seed after this many epochs without a lower validation loss.
    epochs_per_step: epochs per ``train_step`` (one ``lax.scan``).

  Returns:
    ``TrainKernel(init, train_step, extras)``; extras ``encode(params, x)``
    (one seed's residuals and Psi of one series) and ``series_loss(params, x)``.
  """
  settings = settings.validate()
  chex.assert_rank([train_series, val_series], 3)
  if int(num_seeds) < 1 or int(patience) < 1 or int(epochs_per_step) < 1:
    raise ValueError("num_seeds, patience and epochs_per_step must be >= 1; got "
                     f"{num_seeds}, {patience}, {epochs_per_step}")
  if float(lr) <= 0:
    raise ValueError(f"lr must be > 0; got {lr}")
  min_len = 2 * nets.lag + 2
  for name, series in (("train_series", train_series), ("val_series", val_series)):
    if series.shape[2] != nets.num_vars or series.shape[1] < min_len or series.shape[0] < 1:
      raise ValueError(f"{name} must be [n >= 1, T >= {min_len}, {nets.num_vars}]; got "
                       f"{series.shape}")
  train_series = jnp.asarray(train_series, jnp.float32)
  val_series = jnp.asarray(val_series, jnp.float32)
  tx = optax.adam(lr)
  loss = lambda params, x: loss_fn(nets, settings, params, x)[0]
  grad_fn = jax.value_and_grad(loss)

  def init(key):
    params = jax.vmap(nets.init)(jax.random.split(key, num_seeds))
    inf = jnp.full((num_seeds,), jnp.inf, jnp.float32)
    return TrainState(params, jax.vmap(tx.init)(params), params, inf,
                      jnp.zeros((num_seeds,), jnp.int32), jnp.ones((num_seeds,), bool),
                      jnp.zeros((), jnp.int32), jnp.zeros((num_seeds,), jnp.int32))

  def seed_epoch(params, opt_state, best_params, best_val, bad, active, trained):
    def one_series(carry, x):
      p, o = carry
      value, grads = grad_fn(p, x)
      updates, o = tx.update(grads, o, p)
      return (optax.apply_updates(p, updates), o), value

    (new_params, new_opt), train_losses = jax.lax.scan(one_series, (params, opt_state),
                                                       train_series)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(active, a, b), new, old)
    params, opt_state = keep(new_params, params), keep(new_opt, opt_state)
    val = jnp.sum(jax.vmap(lambda x: loss(params, x))(val_series))
    improved = active & (val < best_val)
    best_params = jax.tree.map(lambda a, b: jnp.where(improved, a, b), params, best_params)
    best_val = jnp.where(improved, val, best_val)
    bad = jnp.where(improved, 0, jnp.where(active, bad + 1, bad))
    trained = trained + active.astype(jnp.int32)
    active = active & (bad < patience)
    return (params, opt_state, best_params, best_val, bad, active, trained,
            jnp.sum(train_losses), val)

  def epoch(state: TrainState):
    out = jax.vmap(seed_epoch)(state.params, state.opt_state, state.best_params,
                               state.best_val, state.bad_epochs, state.active,
                               state.epochs_trained)
    (params, opt_state, best_params, best_val, bad, active, trained, train_loss,
     val) = out
    new = TrainState(params, opt_state, best_params, best_val, bad, active,
                     state.epoch + 1, trained)
    return new, (jnp.mean(train_loss), jnp.mean(val))

  def skip(state: TrainState):
    best = jnp.mean(state.best_val)
    return state, (best, best)

  def train_step(state: TrainState, batch=None):
    del batch

    def body(s, _):
      return jax.lax.cond(jnp.any(s.active), epoch, skip, s)

    state, (train_loss, val) = jax.lax.scan(body, state, None, length=int(epochs_per_step))
    metrics = {"loss": train_loss[-1], "val_loss": val[-1],
               "best_val": jnp.mean(state.best_val),
               "active_seeds": jnp.sum(state.active).astype(jnp.float32)}
    return state, metrics

  def encode_fn(params, x):
    return encode(nets, params, x)

  def series_loss(params, x):
    return loss_fn(nets, settings, params, x)

  return contract.train_kernel(init, train_step, encode=encode_fn, series_loss=series_loss)
