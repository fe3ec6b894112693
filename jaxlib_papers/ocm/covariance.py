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
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

Array = jax.Array

METHODS = ("beta_tilde", "beta", "analytic", "sn", "npr", "ocm", "exact")
HEADS = ("ocm", "sn", "npr")


def rademacher_probes(key: Array, num_probes: int, shape, dtype=jnp.float32) -> Array:
  """[num_probes, *shape] entries +-1 with equal probability."""
  if num_probes < 1:
    raise ValueError(f"num_probes must be >= 1, got {num_probes}")
  return jax.random.rademacher(key, (num_probes, *shape), dtype)


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
  eps_hat, jvp_fn, features = jax.linearize(backbone_fn, x_t, has_aux=True)
  v_jv = jax.vmap(lambda v: v * jvp_fn(v))(probes)
  # H_theta v = J_s v = -(J_eps v) / sigma, so sigma^2 v * H v = -sigma v * J_eps v.
  return -sigma_t * jnp.mean(v_jv, axis=0), eps_hat, features


def head_losses(heads: dict[str, Array], *, eps: Array, eps_hat: Array,
                ocm_target_value: Array | None) -> dict[str, Array]:
  """Mean squared regression losses of the heads present in ``heads`` (all [B, ...]).

  Targets are stop-gradient: only the heads learn.
  """
  eps_hat = jax.lax.stop_gradient(eps_hat)
  targets = {
      "sn": jnp.square(eps),
      "npr": jnp.square(eps - eps_hat),
  }
  if ocm_target_value is not None:
    targets["ocm"] = jax.lax.stop_gradient(ocm_target_value)
  losses = {}
  for name, pred in heads.items():
    if name not in targets:
      raise ValueError(f"no target for head {name!r} (OCM needs its probe target)")
    losses[name] = jnp.mean(jnp.square(pred - targets[name]))
  return losses


def eps_variance(method: str, *, eps_hat: Array | None = None, head: Array | None = None,
                 gamma: Array | None = None) -> Array:
  """The estimate of Var[eps | x_t] = 1 + h of a learned method.

  Args:
    method: "ocm" (head = h), "sn" (head = E[eps^2]), "npr" (head = E[(eps - eps_hat)^2]),
      "analytic" (gamma = E||eps_hat||^2 / d at this t), "exact" (head = h*).
  """
  if method in ("ocm", "exact"):
    return 1.0 + head
  if method == "sn":
    return head - jnp.square(eps_hat)
  if method == "npr":
    return head
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
