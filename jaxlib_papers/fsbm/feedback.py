"""Feedback cost G from aligned keypoint trajectories.

For one sampled path X [S, D] on the CondSOC time grid and K aligned keypoint
trajectories KP [K, S, D] on the same grid:
  k*            = argmin_k ||X_r - KP_{k, r}||       (r = 0 forward, S-1 backward)
  delta_{t, d}  = |X_{t, d} - KP_{k*, t, d}| / s_{t, d}   (s: per-time, per-dim
                                                          std over the K keypoints)
  G(X)          = sum_{t, d} (delta_{t, d} - delta_{r, d})^2.
G penalises drifting away from the matched keypoint trajectory *relative to*
the offset at the anchored end, so paths may keep their own offset.

The CondSOC cost needs grad_X G and the "divergence" term. As in the official
code, the divergence term is the Hessian applied to a ones vector (the gradient
of sum(grad G)): H 1, summed over dimensions per time. Because G is piecewise
quadratic in X with constant curvature on each piece, this term (and the
Laplacian) is constant in X almost everywhere: it shifts the reported loss but
contributes nothing to the gradient with respect to the path parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


def keypoint_inv_std(keypoints: ArrayLike) -> jax.Array:
  """[S, D] inverse of the per-time, per-dim std (unbiased) over keypoints.

  Args:
    keypoints: [K, S, D] aligned keypoint trajectories, K >= 2.
  """
  keypoints = jnp.asarray(keypoints)
  if keypoints.ndim != 3 or keypoints.shape[0] < 2:
    raise ValueError(
        f"keypoints must be [K>=2, S, D], got shape {keypoints.shape}")
  std = jnp.std(keypoints, axis=0, ddof=1)
  # A degenerate coordinate (all keypoints equal) would give 0/0; floor it.
  return 1.0 / jnp.maximum(std, 1e-6)


def nearest_keypoint(x_ref: jax.Array, keypoints_ref: jax.Array) -> jax.Array:
  """Index of the keypoint closest to ``x_ref``.

  Args:
    x_ref: [D] the path's point at the anchored time.
    keypoints_ref: [K, D] the keypoints at that time.

  Returns:
    [] int32 index.
  """
  d2 = jnp.sum((keypoints_ref - x_ref[None]) ** 2, axis=-1)
  return jnp.argmin(d2)


def feedback_cost(x: jax.Array, target: jax.Array, inv_std: jax.Array,
                  ref_index: ArrayLike) -> jax.Array:
  """G for one path against one (already matched) keypoint trajectory.

  Args:
    x: [S, D] path.
    target: [S, D] matched keypoint trajectory.
    inv_std: [S, D] inverse per-time std of the keypoints.
    ref_index: [] anchored time index (0 forward, S-1 backward).

  Returns:
    [] scalar G.
  """
  delta = jnp.abs(x - target) * inv_std
  delta_ref = jax.lax.dynamic_index_in_dim(delta, ref_index, axis=0,
                                           keepdims=True)
  return jnp.sum((delta - delta_ref) ** 2)


def _at_end(a: jax.Array, ref_index: ArrayLike, axis: int) -> jax.Array:
  """a at index ref_index along axis, ref_index being 0 or the last index.

  A select between the two static end slices: cheaper on CPU than a dynamic
  slice (a gather once vmapped) and fine for a traced ref_index.
  """
  first = jax.lax.index_in_dim(a, 0, axis=axis, keepdims=False)
  last = jax.lax.index_in_dim(a, a.shape[axis] - 1, axis=axis, keepdims=False)
  return jnp.where(jnp.asarray(ref_index) == 0, first, last)


def _matched_target(x, keypoints, ref_index):
  x_ref = _at_end(x, ref_index, 0)
  kp_ref = _at_end(keypoints, ref_index, 1)
  # The assignment is a discrete choice: no gradient flows through it.
  k_star = nearest_keypoint(jax.lax.stop_gradient(x_ref), kp_ref)
  return keypoints[k_star]


def feedback_terms_autodiff(x: jax.Array, keypoints: jax.Array,
                            inv_std: jax.Array, ref_index: ArrayLike):
  """Reference implementation of :func:`feedback_terms` by autodiff.

  grad by reverse mode, H 1 by forward-over-reverse (a JVP of the gradient
  with a ones tangent), as the official code's grad-of-grad-sum.
  """
  target = _matched_target(x, keypoints, ref_index)

  def grad_fn(xx):
    return jax.value_and_grad(
        lambda z: feedback_cost(z, target, inv_std, ref_index))(xx)

  (g, grad), (_, hess_ones) = jax.jvp(grad_fn, (x,), (jnp.ones_like(x),))
  return g, grad, hess_ones


def feedback_terms(x: jax.Array, keypoints: jax.Array, inv_std: jax.Array,
                   ref_index: ArrayLike):
  """G, grad G and the divergence term H 1 for one path, in closed form.

  With q = sign(X - KP*) / s, c = delta - delta_r and e_r the one-hot of the
  anchored time (per dimension):
    grad G = 2 c q - e_r 2 q_r sum_t c_t,
    H 1    = 2 q (q - q_r) - e_r 2 q_r sum_t (q_t - q_r).
  Equal to :func:`feedback_terms_autodiff` (tested) at a fraction of the cost
  inside the CondSOC double-backward.

  Args:
    x: [S, D] path on the keypoint time grid.
    keypoints: [K, S, D] aligned trajectories.
    inv_std: [S, D] from :func:`keypoint_inv_std`.
    ref_index: [] 0 (forward) or S-1 (backward); may be traced.

  Returns:
    (g [], grad [S, D], hess_ones [S, D]).
  """
  target = _matched_target(x, keypoints, ref_index)
  diff = x - target
  q = jnp.sign(diff) * inv_std
  delta = jnp.abs(diff) * inv_std

  def at_ref(a):
    return _at_end(a, ref_index, 0)[None]

  c = delta - at_ref(delta)
  q_ref = at_ref(q)
  onehot = (jnp.arange(x.shape[0]) == ref_index)[:, None].astype(x.dtype)
  g = jnp.sum(c**2)
  grad = 2.0 * c * q - onehot * 2.0 * q_ref * jnp.sum(c, axis=0, keepdims=True)
  hess_ones = (2.0 * q * (q - q_ref)
               - onehot * 2.0 * q_ref * jnp.sum(q - q_ref, axis=0, keepdims=True))
  return g, grad, hess_ones


def check_keypoints(keypoints, num_steps: int | None = None) -> np.ndarray:
  """Validates a [K, S, D] keypoint array and returns it as float32 numpy."""
  arr = np.asarray(keypoints)
  if arr.ndim != 3 or arr.shape[0] < 2:
    raise ValueError(f"keypoints must be [K>=2, S, D], got shape {arr.shape}")
  if not np.all(np.isfinite(arr)):
    raise ValueError("keypoints contain NaN or Inf")
  if num_steps is not None and arr.shape[1] != num_steps:
    raise ValueError(
        f"keypoints time grid has {arr.shape[1]} points but the CondSOC grid "
        f"(csoc.S) has {num_steps}; they must be equal")
  return arr.astype(np.float32)
