"""Point clouds: Kabsch RMSD, validity and the flat-bottom energy (JAX, differentiable).

Shapes: a conformer is ``[A, 3]`` (A atoms, Angstrom); batches carry leading axes. The
ligand is a chain, so its bonded pairs are (i, i+1), its 1-3 pairs (i, i+2) and its
non-local pairs |i - j| >= 3.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


def check_same_atoms(x: ArrayLike, y: ArrayLike, names: tuple[str, str] = ("x", "y")
                     ) -> None:
  """Raises a ValueError unless ``x`` and ``y`` are ``[..., A, 3]`` with the same A."""
  sx, sy = np.shape(x), np.shape(y)
  for name, shape in zip(names, (sx, sy)):
    if len(shape) < 2 or shape[-1] != 3:
      raise ValueError(f"{name} must be a point cloud [..., atoms, 3]; got shape {shape}")
  if sx[-2] != sy[-2]:
    raise ValueError(f"{names[0]} and {names[1]} must have the same number of atoms; got "
                     f"{sx[-2]} and {sy[-2]} (shapes {sx} and {sy})")


def safe_sqrt(x: jax.Array) -> jax.Array:
  """sqrt with a zero (not NaN) gradient at 0: the double-where form."""
  positive = x > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1.0)), 0.0)


def kabsch_rmsd(x: ArrayLike, y: ArrayLike) -> jax.Array:
  """RMSD after the best proper rotation and translation of ``x`` onto ``y``.

  Singular values of the 3x3 covariance by SVD (closed-form eigenvalues in float32 erred by
  .1-.3 A on planar chains), the smallest one's sign flipped when det < 0 (no reflections),
  and a square root whose gradient is 0 (not NaN) at RMSD 0.

  Args:
    x, y: ``[..., A, 3]`` with the same A (leading axes broadcast).

  Returns:
    ``[...]`` the RMSD.
  """
  check_same_atoms(x, y)
  x, y = jnp.asarray(x), jnp.asarray(y)
  xc = x - x.mean(-2, keepdims=True)
  yc = y - y.mean(-2, keepdims=True)
  cov = jnp.einsum("...ad,...ae->...de", xc, yc)
  singular = jnp.linalg.svd(cov, compute_uv=False)
  sign = jnp.where(jnp.linalg.det(cov) < 0, -1.0, 1.0)
  trace = singular[..., 0] + singular[..., 1] + sign * singular[..., 2]
  msd = ((xc ** 2).sum((-1, -2)) + (yc ** 2).sum((-1, -2)) - 2 * trace) / x.shape[-2]
  return safe_sqrt(jnp.maximum(msd, 0.0))


def pairwise_rmsd(x0: ArrayLike, x1: ArrayLike) -> jax.Array:
  """The cost matrix ``[n, m]`` of Kabsch RMSDs between ``x0 [n, A, 3]`` and ``x1 [m, A, 3]``,
  gradient stopped (couplings select pairs; nothing differentiates through them)."""
  check_same_atoms(x0, x1, ("x0", "x1"))
  x0, x1 = jnp.asarray(x0), jnp.asarray(x1)
  return jax.lax.stop_gradient(kabsch_rmsd(x0[:, None], x1[None, :]))


class Geometry(NamedTuple):
  """What validity and the energy check against (the toy's chemistry)."""
  bond: float               # ideal bond length (A)
  one_three: float          # ideal 1-3 distance (A)
  slack: float              # bonds and 1-3 pairs valid within this fraction of ideal
  nonlocal_min: float       # |i - j| >= 3 pairs at least this far apart (A)
  pocket_min: float         # every atom at least this far from every pocket point (A)


def chain_geometry(bond: float = 1.5, angle_deg: float = 111.0) -> Geometry:
  """The brief's validity rules: 10% on bonds and 1-3 pairs, 2.6 A, 2.65 A to the pocket."""
  return Geometry(bond, float(2 * bond * np.sin(np.deg2rad(angle_deg) / 2)), 0.1, 2.6, 2.65)


def _distances(x: jax.Array) -> jax.Array:
  diff = x[..., :, None, :] - x[..., None, :, :]
  return safe_sqrt((diff ** 2).sum(-1))


def _pocket_distance(x: jax.Array, pocket: jax.Array) -> jax.Array:
  """``[..., A, P]`` distances from every atom to every pocket point."""
  diff = x[..., :, None, :] - pocket
  return safe_sqrt((diff ** 2).sum(-1))


def _pocket_squared(x: jax.Array, pocket: jax.Array) -> jax.Array:
  """``[..., A, P]`` squared distances, one coordinate at a time (no size-3 minor axis,
  which XLA:CPU vectorises poorly: ~6x slower forward at the dock stage's shapes)."""
  return sum((x[..., k:k + 1] - pocket[:, k]) ** 2 for k in range(3))


def _pocket_hinge_parts(x, pocket, margin):
  d2 = _pocket_squared(x, pocket)
  inside = d2 < margin * margin
  d = safe_sqrt(jnp.where(inside, d2, 0.0))
  value = jnp.where(inside, margin - d, 0.0).sum((-1, -2))
  # d/dx_a of (margin - |x_a - p|) is -(x_a - p) / |x_a - p| inside (0 where the points
  # coincide, as safe_sqrt's gradient).
  w = jnp.where(inside & (d2 > 0), 1.0 / jnp.where(d2 > 0, d, 1.0), 0.0)
  return value, (w, inside)


@jax.custom_vjp
def pocket_hinge(x: jax.Array, pocket: jax.Array, margin: jax.Array) -> jax.Array:
  """``sum_{a, p} relu(margin - |x_a - p|)`` per conformer: ``x [..., A, 3]``,
  ``pocket [P, 3]`` -> ``[...]``.

  The gradient is written out (``w_ap = [|x_a - p| < margin] / |x_a - p|``, then
  ``dx_a = -(x_a sum_p w_ap - (w @ pocket)_a)``, a matmul) instead of differentiating the
  ``[..., A, P, 3]`` differences: the same value and gradient as
  ``relu(margin - safe_sqrt(...))`` to rounding; value and gradient of the whole energy on
  the dock stage's 6 x 128 conformers of 8 atoms against 469 pocket points: 78 ms -> 8 ms
  on one core (``benchmarks/unbalanced_fm.py``). First derivatives only (reverse mode).
  """
  return _pocket_hinge_parts(x, pocket, margin)[0]


def _pocket_hinge_fwd(x, pocket, margin):
  value, (w, inside) = _pocket_hinge_parts(x, pocket, margin)
  return value, (x, pocket, margin, w, inside)


def _pocket_hinge_bwd(residuals, g):
  x, pocket, margin, w, inside = residuals
  gw = g[..., None, None] * w                                        # [..., A, P]
  gx = gw @ pocket - x * gw.sum(-1, keepdims=True)
  lead = tuple(range(gw.ndim - 1))
  gp = jnp.einsum("...ap,...ac->pc", gw, x) - pocket * gw.sum(lead)[:, None]
  gm = (g[..., None, None] * inside).sum()
  return gx, gp, jnp.asarray(gm, jnp.result_type(margin))


pocket_hinge.defvjp(_pocket_hinge_fwd, _pocket_hinge_bwd)


def _masks(num_atoms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  i, j = np.triu_indices(num_atoms, 1)
  gap = j - i
  return (i, j), gap == 1, gap == 2


def violations(x: ArrayLike, pocket: ArrayLike, geometry: Geometry) -> dict[str, jax.Array]:
  """Per conformer ``[...]`` booleans: ``bonds`` (a bond or 1-3 pair off by more than the
  slack), ``clash`` (a non-local pair too close), ``pocket`` (an atom too close to the
  pocket), and ``valid`` (none of them). ``x: [..., A, 3]``, ``pocket: [P, 3]``."""
  x = jnp.asarray(x)
  (i, j), bonded, one_three = _masks(x.shape[-2])
  d = _distances(x)[..., i, j]
  ideal = jnp.where(bonded, geometry.bond, geometry.one_three)
  local = bonded | one_three
  off = jnp.abs(d - ideal) > geometry.slack * ideal
  bonds = jnp.any(off & local, -1)
  clash = jnp.any((d < geometry.nonlocal_min) & ~local, -1)
  near = _pocket_distance(x, jnp.asarray(pocket)).min((-1, -2)) < geometry.pocket_min
  return {"bonds": bonds, "clash": clash, "pocket": near, "valid": ~(bonds | clash | near)}


def flat_bottom_energy(x: ArrayLike, pocket: ArrayLike, geometry: Geometry) -> jax.Array:
  """The flat-bottom energy ``[...]`` of conformers ``x [..., A, 3]``: zero on valid ones.

  Linear hinges (the official relaxation loss's shape): a bond or 1-3 pair outside its
  slack band, a non-local pair below ``nonlocal_min``, an atom closer than ``pocket_min``
  to a pocket point. The flat bottom sits at the validity bounds (the code's .75/1.25/.8
  factors scale RDKit bounds this toy does not have).
  """
  x = jnp.asarray(x)
  (i, j), bonded, one_three = _masks(x.shape[-2])
  d = _distances(x)[..., i, j]
  ideal = jnp.where(bonded, geometry.bond, geometry.one_three)
  local = bonded | one_three
  band = jax.nn.relu(jnp.abs(d - ideal) - geometry.slack * ideal)
  near = jax.nn.relu(geometry.nonlocal_min - d)
  pair = jnp.where(local, band, near).sum(-1)
  pocket = jnp.asarray(pocket, x.dtype)
  return pair + pocket_hinge(x, pocket, jnp.asarray(geometry.pocket_min, x.dtype))
