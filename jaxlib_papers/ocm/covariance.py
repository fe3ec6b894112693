"""Optimal covariance matching (OCM) and the baselines' x0-covariances.

Second-order Tweedie: Cov[x0 | x_t] = (sigma_t^4 H(x_t) + sigma_t^2 I) / abar_t with H the
Hessian of log q_t. With h = sigma_t^2 diag H the diagonal x0-covariance is
(sigma_t^2 / abar_t)(1 + h); 1 + h is the posterior variance of eps given x_t, which is what
every baseline estimates in its own way:

* OCM: regress h_phi onto sigma_t^2 v * (d/dx (s_theta . v)) with Rademacher v (unbiased for
  sigma_t^2 diag H_theta because E[v v^T] = I); with s_theta = -eps_theta / sigma_t that is
  -sigma_t v * (J_eps v), one jvp of the frozen eps network.
* Analytic-DPM: a scalar per t, 1 - E||eps_hat||^2 / d.
* SN-DPM: a head g ~ E[eps^2 | x_t]; variance g - eps_hat^2.
* NPR-DPM: a head g ~ E[(eps - eps_hat)^2 | x_t].
* DDPM's fixed beta~ (c = 0) and beta (c = sigma_t^2, which reproduces the reverse variance
  beta_{t|s} for every skip s).
* "jacobian" (a diagnostic beyond the paper, not one of its methods): h_theta = -sigma_t
  diag(d eps_theta / d x_t), the network's own Jacobian diagonal computed exactly
  (:func:`jacobian_diagonal`, d jvps). It is OCM's target without the probe noise, i.e. what
  the OCM head converges to, so its row shows what the paper's estimator can reach on a
  given eps network.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

from jaxlib_papers.core import prng

Array = jax.Array

METHODS = ("beta_tilde", "beta", "analytic", "sn", "npr", "ocm", "jacobian", "exact")
HEADS = ("ocm", "sn", "npr")
# Report-only rows beyond the paper (never one of the claims' methods). "jacobian" costs d
# jvps of the eps network per x_t, so it is for vector data only (d = 3072 on CIFAR-10).
DIAGNOSTICS = ("jacobian",)


def rademacher_probes(key: Array, num_probes: int, shape, dtype=jnp.float32) -> Array:
  """[num_probes, *shape] entries +-1 with equal probability."""
  if num_probes < 1:
    raise ValueError(f"num_probes must be >= 1, got {num_probes}")
  return prng.rademacher(key, (num_probes, *shape), dtype)


def ocm_target(backbone_fn: Callable[[Array], tuple[Array, Array]], x_t: Array,
               sigma_t: Array, probes: Array) -> tuple[Array, Array, Array]:
  """The OCM regression target sigma_t^2 v * (H_theta v), averaged over probes.

  ``backbone_fn`` maps x_t -> (eps_hat, features) sample-wise (no coupling across the batch),
  so one batched jvp gives every sample's Jacobian-vector product. The eps network is
  linearised once and the linear map is applied to every probe.

  Args:
    backbone_fn: x [B, ...] -> (eps_hat [B, ...], features [B, ...]).
    x_t: [B, ...].
    sigma_t: broadcastable to x_t, e.g. [B, 1, ...].
    probes: [M, B, ...] Rademacher.

  Returns:
    (target [B, ...] (not yet stop-gradient), eps_hat [B, ...], features).
  """
  chex.assert_equal_shape([x_t, probes[0]])
  eps_hat, jvp_fn, features = jax.linearize(backbone_fn, x_t, has_aux=True)
  v_jv = jax.vmap(lambda v: v * jvp_fn(v))(probes)
  # H_theta v = J_s v = -(J_eps v) / sigma, so sigma^2 v * H v = -sigma v * J_eps v.
  return -sigma_t * jnp.mean(v_jv, axis=0), eps_hat, features


def jacobian_diagonal(backbone_fn: Callable[[Array], tuple[Array, Array]], x_t: Array
                      ) -> tuple[Array, Array, Array]:
  """The exact diagonal of each sample's Jacobian d eps_theta(x_t) / d x_t.

  ``backbone_fn`` is sample-wise (as in :func:`ocm_target`), so one batched jvp along the
  i-th basis vector gives every sample's i-th Jacobian column; its i-th entry is the
  diagonal's. The network is linearised once and the d basis directions are vmapped: d jvps,
  which is cheap for vectors (d = 2..16 here) and prohibitive for images.

  Args:
    backbone_fn: x [B, ...] -> (eps_hat [B, ...], features [B, ...]).
    x_t: [B, ...].

  Returns:
    (diag J [B, ...], eps_hat [B, ...], features).
  """
  item = x_t.shape[1:]
  d = math.prod(item)
  eps_hat, jvp_fn, features = jax.linearize(backbone_fn, x_t, has_aux=True)
  basis = jnp.eye(d, dtype=x_t.dtype).reshape((d, 1) + item)
  diag = jnp.sum(jax.vmap(lambda e: e * jvp_fn(jnp.broadcast_to(e, x_t.shape)))(basis),
                 axis=0)
  return diag, eps_hat, features


PARAMETERISATIONS = ("linear", "exp", "softplus")
HEAD_LOSSES = ("mse", "rmse", "nll")
# rmse's weight is 1 / max(sg(m), this): where the target's conditional mean is <= 0 (the
# eps network's Jacobian can say "negative variance") the fit drives m = exp(raw) to 0,
# and once exp underflows (raw < -87 in float32) 1 / sg(m) * dm/draw is inf * 0 = NaN.
# Any positive weight that does not depend on y keeps the fixed point m = E[y | x_t].
RMSE_WEIGHT_FLOOR = 1e-6
# softplus(raw + this) = 1 at raw = 0: log(expm1(1)) as XLA computes it in float32 (one ulp
# below the correctly rounded value; written out so that importing the module does not
# start jax's backend, which must stay free to take XLA_FLAGS; tested against the formula).
_SOFTPLUS_ONE = float.fromhex("0x1.1528860000000p-1")


def head_variance(method: str, raw: Array, *, eps_hat: Array | None = None,
                  param: str = "linear") -> Array:
  """A head's estimate m of Var[eps | x_t] (= 1 + h) from its raw output (all [B, ...]).

  ``param`` says what the head outputs:

  * "linear" (the papers' heads): OCM outputs h (m = 1 + raw), NPR outputs
    E[(eps - eps_hat)^2] (m = raw), SN outputs E[eps^2] (m = raw - eps_hat^2). m can be
    negative, and a head's absolute error in m is what clips a small variance to 0.
  * "exp": m = exp(raw) for every head; positive by construction, and a network error in raw
    is a *relative* error in m, so small variances (small t, narrow modes) keep their
    precision. (For SN this means E[eps^2] = eps_hat^2 + exp(raw).)
  * "softplus": m = softplus(raw + log(e - 1)); positive, relative near 0, linear for large m.

  Every parameterisation gives m = 1 at a zero-initialised head's raw = 0, except "linear"
  for NPR / SN (the papers' initial value 0 / -eps_hat^2).
  """
  if param == "linear":
    if method == "ocm":
      return 1.0 + raw
    if method == "npr":
      return raw
    if method == "sn":
      return raw - jnp.square(eps_hat)
    raise ValueError(f"head_variance: unknown head {method!r}; expected one of {HEADS}")
  if method not in HEADS:
    raise ValueError(f"head_variance: unknown head {method!r}; expected one of {HEADS}")
  if param == "exp":
    return jnp.exp(raw)
  if param == "softplus":
    return jax.nn.softplus(raw + _SOFTPLUS_ONE)
  raise ValueError(f"param must be one of {PARAMETERISATIONS}, got {param!r}")


def variance_targets(*, eps: Array, eps_hat: Array, ocm_target_value: Array | None
                     ) -> dict[str, Array]:
  """Each head's unbiased regression target y for m = Var[eps | x_t] (stop-gradient).

  E[y | x_t] = Var[eps | x_t] for SN (eps^2 - eps_hat^2, exact for the optimal eps_hat) and
  NPR ((eps - eps_hat)^2); for OCM y = 1 + sigma^2 v * (H_theta v), whose mean over the probe
  is 1 + sigma^2 diag H_theta.
  """
  eps_hat = jax.lax.stop_gradient(eps_hat)
  targets = {"sn": jnp.square(eps) - jnp.square(eps_hat),
             "npr": jnp.square(eps - eps_hat)}
  if ocm_target_value is not None:
    targets["ocm"] = 1.0 + jax.lax.stop_gradient(ocm_target_value)
  return targets


def head_losses(heads: dict[str, Array], *, eps: Array, eps_hat: Array,
                ocm_target_value: Array | None, param: str = "linear",
                loss: str = "mse") -> dict[str, Array]:
  """Regression losses of the heads in ``heads`` (raw outputs, all [B, ...]).

  Both losses are minimised by m = E[y | x_t], so both keep the paper's unbiased objective
  (the probe noise and the eps noise average out; Banerjee et al. 2005, Bregman divergences):

  * "mse": mean (m - y)^2, the paper's squared loss (with ``param="linear"`` exactly the
    paper's ||h - sigma^2 v * Hv||^2, ||g - eps^2||^2, ||g - (eps - eps_hat)^2||^2).
  * "rmse": mean (m - y)^2 / sg(max(m, RMSE_WEIGHT_FLOOR)), a reweighted squared loss: for
    a weight that does not depend on y the fixed point is still m = E[y | x_t], and with
    m = exp(raw) the gradient in raw is 2 (m - y) instead of mse's 2 (m - y) m, so small
    variances are not learnt m times slower. Needs a positive parameterisation.
  * "nll": mean (log m + y / m), the Bregman divergence of -log (the Gaussian negative
    log-likelihood form). It is linear in y, so a noisy probe target stays unbiased, and its
    gradient in log m is (1 - y / m): fully relative. A single negative target (the probe
    target and SN's eps^2 - eps_hat^2 can be < 0) makes the per-sample loss unbounded below;
    on gmm16 it diverged (NaN) within 20 steps. Needs a positive parameterisation.

  Targets are stop-gradient: only the heads learn.
  """
  if loss not in HEAD_LOSSES:
    raise ValueError(f"loss must be one of {HEAD_LOSSES}, got {loss!r}")
  if loss != "mse" and param == "linear":
    raise ValueError(f"loss={loss!r} needs a positive parameterisation "
                     "(param 'exp' or 'softplus')")
  targets = variance_targets(eps=eps, eps_hat=eps_hat, ocm_target_value=ocm_target_value)
  eps_hat = jax.lax.stop_gradient(eps_hat)
  losses = {}
  for name, raw in heads.items():
    if name not in targets:
      raise ValueError(f"no target for head {name!r} (OCM needs its probe target)")
    m = head_variance(name, raw, eps_hat=eps_hat, param=param)
    y = targets[name]
    if loss == "mse":
      losses[name] = jnp.mean(jnp.square(m - y))
    elif loss == "rmse":
      weight = 1.0 / jax.lax.stop_gradient(jnp.maximum(m, RMSE_WEIGHT_FLOOR))
      losses[name] = jnp.mean(jnp.square(m - y) * weight)
    else:
      losses[name] = jnp.mean(jnp.log(m) + y / m)
  return losses


def eps_variance(method: str, *, eps_hat: Array | None = None, head: Array | None = None,
                 gamma: Array | None = None, param: str = "linear") -> Array:
  """The estimate of Var[eps | x_t] = 1 + h of a learned method.

  Args:
    method: "ocm" / "sn" / "npr" (head = the raw head output, read through ``param``, see
      :func:`head_variance`), "analytic" (gamma = E||eps_hat||^2 / d at this t),
      "exact" (head = h*), "jacobian" (head = h_theta = -sigma_t diag J_eps).
  """
  if method in HEADS:
    return head_variance(method, head, eps_hat=eps_hat, param=param)
  if method in ("exact", "jacobian"):
    return 1.0 + head
  if method == "analytic":
    return 1.0 - gamma
  raise ValueError(f"eps_variance: unknown method {method!r}")


def x0_covariance(method: str, abar_t: Array, *, eps_var: Array | None = None,
                  max_var: float = 1.0) -> Array:
  """The x0-covariance c of ``method`` at noise level abar_t (scalar).

  Learned methods: clip_[0, max_var]((sigma^2 / abar) eps_var); the upper bound is the data
  variance bound (1 for data in [-1, 1]).
  """
  sig2 = 1.0 - abar_t
  if method == "beta_tilde":
    return jnp.zeros_like(abar_t)
  if method == "beta":
    return sig2
  if eps_var is None:
    raise ValueError(f"method {method!r} needs eps_var")
  return jnp.clip(sig2 / abar_t * eps_var, 0.0, max_var)
