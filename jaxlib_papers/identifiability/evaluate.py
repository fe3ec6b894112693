"""The paper's evaluation protocol as pure, vmappable JAX functions.

* ``heldout_r2``: fit a linear map (least squares, with or without intercept) from the
  representation to the target on the first half of the samples, report R^2 (the mean over
  target dimensions, sklearn's ``r2_score`` default) on the second half.
* ``singular_value_mae``: fit ``h -> z`` without intercept on all samples and compare the
  singular values of the coefficient matrix with ``1 / kappa`` (orthogonality up to scale).
* ``same_class_cosine``: DIET's head rows of one class collapse (Theorem 1).
* ``bayes_cross_entropy``: the cross-entropy of the true posterior of the labels, the floor
  of the training loss.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax


def fit_linear(h: jax.Array, y: jax.Array, intercept: bool = True
               ) -> tuple[jax.Array, jax.Array]:
  """Least squares ``y ≈ h @ coef + bias``.

  Args:
    h: [n, p] inputs; y: [n, q] targets.
    intercept: fit ``bias`` (else it is zero).

  Returns:
    ``(coef [p, q], bias [q])``.
  """
  chex.assert_rank([h, y], 2)
  if intercept:
    h_mean, y_mean = jnp.mean(h, 0), jnp.mean(y, 0)
    coef = jnp.linalg.lstsq(h - h_mean, y - y_mean)[0]
    return coef, y_mean - h_mean @ coef
  return jnp.linalg.lstsq(h, y)[0], jnp.zeros(y.shape[1], y.dtype)


def r2_score(y: jax.Array, pred: jax.Array) -> jax.Array:
  """``mean_j 1 - SS_res,j / SS_tot,j`` (sklearn's ``uniform_average``); y, pred: [n, q]."""
  ss_res = jnp.sum((y - pred) ** 2, axis=0)
  ss_tot = jnp.sum((y - jnp.mean(y, 0)) ** 2, axis=0)
  return jnp.mean(1.0 - ss_res / jnp.maximum(ss_tot, 1e-30))


def heldout_r2(h: jax.Array, y: jax.Array, intercept: bool = True) -> jax.Array:
  """R^2 of ``y`` on the second half from a linear fit on the first half (h: [n, p])."""
  half = h.shape[0] // 2
  coef, bias = fit_linear(h[:half], y[:half], intercept)
  return r2_score(y[half:], h[half:] @ coef + bias)


def insample_r2(h: jax.Array, y: jax.Array) -> jax.Array:
  """R^2 of ``y`` from a linear fit (with intercept) on the same samples."""
  coef, bias = fit_linear(h, y, True)
  return r2_score(y, h @ coef + bias)


def singular_value_mae(h: jax.Array, y: jax.Array, target: jax.Array) -> jax.Array:
  """Mean |s_i - target| over the singular values of the no-intercept fit ``h -> y``."""
  coef, _ = fit_linear(h, y, intercept=False)
  return jnp.mean(jnp.abs(jnp.linalg.svd(coef, compute_uv=False) - target))


def same_class_cosine(rows: jax.Array, num_classes: int) -> jax.Array:
  """Mean over classes of the mean pairwise cosine between head rows of one class.

  Args:
    rows: [K, d] head rows; row i belongs to class ``i mod num_classes``.
    num_classes: |C|; needs at least two rows per class.
  """
  k = rows.shape[0]
  if k < 2 * num_classes:
    raise ValueError(f"same_class_cosine needs >= 2 rows per class; got {k} rows for "
                     f"{num_classes} classes")
  unit = rows / jnp.maximum(jnp.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
  cls = jnp.arange(k) % num_classes
  sums = jax.ops.segment_sum(unit, cls, num_segments=num_classes)             # [C, d]
  counts = jax.ops.segment_sum(jnp.ones(k), cls, num_segments=num_classes)    # [C]
  pair_mean = (jnp.sum(sums**2, 1) - counts) / (counts * (counts - 1))
  return jnp.mean(pair_mean)


def bayes_cross_entropy(z: jax.Array, target: jax.Array, centers: jax.Array,
                        kappa: jax.Array, num_labels: int) -> jax.Array:
  """Cross-entropy of the true posterior ``p(y | z)`` under the vMF mixture.

  Label ``j`` (a class when ``num_labels = |C|``, an instance index when ``num_labels = N``)
  has class ``j mod |C|`` and every label is equally likely a priori, so
  ``p(j | z) = softmax_j(kappa <v_{j mod |C|}, z>)``.

  Args:
    z: [n, d] latents; target: [n] labels in [0, num_labels); centers: [C, d]; kappa: [].
  """
  logits = kappa * z @ centers[jnp.arange(num_labels) % centers.shape[0]].T
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, target))
