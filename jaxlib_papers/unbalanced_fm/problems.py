"""The two generated problems of the brief (section 3).

A. Reweighted modes: 8 Gaussians on a circle of radius 4 (sigma .3); p0 weights uniform,
   p1 weights proportional to k^2. For a cutoff delta well below the 3.06 A gap between
   modes the cutoff coupling has a closed form (:func:`modes_closed_form`).
B. A ligand chain moving from apo to holo conformations in a pocket: 8 atoms by NeRF
   (bond 1.5 A, angle 111 deg, 5 torsions in {-60, 60, 180} deg), atoms 0-2 fixing the
   pocket frame. Holo: 4 torsion patterns with weights .55/.25/.15/.05 (jitter 8 deg,
   coordinates + N(0, .02^2)); apo: i.i.d. torsions (g-, g+, t) = (.15, .45, .4), jitter 15
   deg, a rigid rotation N(0, 10 deg) and translation N(0, .3^2), coordinates + N(0, .05^2).
   The pocket is a 1.5 A grid of points 3.8-6 A from the holo references.
B-relax: ``K`` docked candidates per holo conformer (noise U(0, .35) A and a rigid jitter).

The generators run on the host in NumPy (``rng``: a ``numpy.random.Generator``): they are
data, drawn once per run, and NumPy costs no XLA compilation.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.unbalanced_fm import geometry

# ------------------------------------------------------------------------- A: modes

NUM_MODES, RADIUS, MODE_STD = 8, 4.0, 0.3


def mode_weights() -> tuple[np.ndarray, np.ndarray]:
  """(w0, w1) ``[8]`` each: uniform and proportional to k^2."""
  k = np.arange(1, NUM_MODES + 1, dtype=np.float64)
  return np.full(NUM_MODES, 1 / NUM_MODES), k ** 2 / (k ** 2).sum()


def mode_centers() -> np.ndarray:
  """``[8, 2]`` the modes on the circle of radius 4."""
  angles = 2 * np.pi * np.arange(NUM_MODES) / NUM_MODES
  return RADIUS * np.stack([np.cos(angles), np.sin(angles)], -1)


def stratified_labels(num: int, weights: np.ndarray) -> np.ndarray:
  """``[num]`` mode labels with counts round(num * w) (stratified draws of the mixture: the
  mode counts carry no noise, so the coupling's estimates vary only through the pairs)."""
  counts = np.floor(num * np.asarray(weights)).astype(int)
  order = np.argsort(-(num * weights - counts))
  counts[order[:num - counts.sum()]] += 1
  return np.repeat(np.arange(len(weights)), counts)


def sample_modes(rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
  """``[n, 2]`` float32 points of the modes ``labels [n]`` (int)."""
  x = mode_centers()[labels] + MODE_STD * rng.standard_normal(labels.shape + (2,))
  return x.astype(np.float32)


def modes_closed_form(delta: float) -> dict[str, float]:
  """The cutoff coupling of problem A for delta well below the gap (3.06): acceptance
  Z = sum_k w0_k w1_k (1 - exp(-delta^2 / 4 sigma^2)) (|x0 - x1|^2 / 2 sigma^2 is chi^2_2
  within a mode), q0 ∝ w0 w1 (TV to p0 .355) and q1 = p1."""
  w0, w1 = mode_weights()
  within = 1 - np.exp(-delta ** 2 / (4 * MODE_STD ** 2))
  q0 = w0 * w1 / (w0 * w1).sum()
  return {"acceptance": float((w0 * w1).sum() * within),
          "tv0": float(0.5 * np.abs(q0 - w0).sum()), "tv1": 0.0}


# ------------------------------------------------------------------------- B: ligand

TRANS, GAUCHE_PLUS, GAUCHE_MINUS = 180.0, 60.0, -60.0
HOLO_PATTERNS = (("t", "t", "t", "t", "t"), ("t", "t", "g+", "t", "t"),
                 ("t", "t", "t", "g-", "t"), ("g+", "t", "t", "t", "t"))
HOLO_WEIGHTS = (0.55, 0.25, 0.15, 0.05)
_ANGLE = {"t": TRANS, "g+": GAUCHE_PLUS, "g-": GAUCHE_MINUS}


class LigandSettings(NamedTuple):
  """Problem B's generator."""
  bond: float = 1.5               # A
  angle: float = 111.0            # deg
  holo_jitter: float = 8.0        # deg, on every torsion
  holo_noise: float = 0.02        # A, coordinates
  apo_probs: tuple[float, float, float] = (0.15, 0.45, 0.4)   # (g-, g+, t)
  apo_jitter: float = 15.0        # deg
  apo_rotation: float = 10.0      # deg, sd of the rotation vector's components
  apo_translation: float = 0.3    # A
  apo_noise: float = 0.05         # A
  pocket_spacing: float = 1.5     # A
  pocket_shell: tuple[float, float] = (3.8, 6.0)   # A from the holo references


class Ligand(NamedTuple):
  """Problem B, built once by :func:`make_ligand`."""
  settings: LigandSettings
  references: np.ndarray    # [4, A, 3] the holo modes' ideal conformers
  weights: np.ndarray       # [4] holo mode weights
  pocket: np.ndarray        # [P, 3] pocket points
  geometry: geometry.Geometry


def nerf_chain(torsions: np.ndarray, bond: float, angle_deg: float) -> np.ndarray:
  """A chain of ``T + 3`` atoms placed by NeRF from ``torsions [..., T]`` (degrees).

  Atoms 0-2 sit in a fixed frame (the pocket's): 0 at the origin, 1 on +x, 2 in the xy
  plane; every bond is ``bond`` long and every bond angle ``angle_deg``. Returns
  ``[..., T + 3, 3]``.
  """
  torsions = np.deg2rad(np.asarray(torsions, np.float64))
  theta = np.deg2rad(angle_deg)
  batch = torsions.shape[:-1]
  a1 = np.array([bond, 0.0, 0.0])
  a2 = a1 + bond * np.array([-np.cos(theta), np.sin(theta), 0.0])
  atoms = [np.broadcast_to(a, batch + (3,)) for a in (np.zeros(3), a1, a2)]
  for k in range(torsions.shape[-1]):
    a, b, c = atoms[-3:]
    bc = (c - b) / np.linalg.norm(c - b, axis=-1, keepdims=True)
    normal = np.cross(b - a, bc)
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    m = np.cross(normal, bc)
    phi = torsions[..., k, None]
    atoms.append(c - bond * np.cos(theta) * bc + bond * np.sin(theta) * (
        np.cos(phi) * m + np.sin(phi) * normal))
  return np.stack(atoms, -2)


def make_ligand(settings: LigandSettings = LigandSettings()) -> Ligand:
  """The references, the pocket grid and the validity rules of problem B."""
  torsions = np.array([[_ANGLE[s] for s in p] for p in HOLO_PATTERNS])
  refs = nerf_chain(torsions, settings.bond, settings.angle)
  flat = refs.reshape(-1, 3)
  low, high = settings.pocket_shell
  axes = [np.arange(flat[:, d].min() - high, flat[:, d].max() + high + 1e-6,
                    settings.pocket_spacing) for d in range(3)]
  grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
  nearest = np.sqrt(((grid[:, None] - flat[None]) ** 2).sum(-1)).min(1)
  pocket = grid[(nearest >= low) & (nearest <= high)].astype(np.float32)
  return Ligand(settings, refs.astype(np.float32), np.asarray(HOLO_WEIGHTS, np.float32),
                pocket, geometry.chain_geometry(settings.bond, settings.angle))


def _rotation(vector: np.ndarray) -> np.ndarray:
  """Rodrigues: ``[..., 3]`` rotation vectors (radians) to ``[..., 3, 3]`` matrices."""
  angle = np.sqrt((vector ** 2).sum(-1, keepdims=True) + 1e-12)
  k = vector / angle
  zero = np.zeros_like(k[..., 0])
  cross = np.stack([np.stack([zero, -k[..., 2], k[..., 1]], -1),
                    np.stack([k[..., 2], zero, -k[..., 0]], -1),
                    np.stack([-k[..., 1], k[..., 0], zero], -1)], -2)
  s, c = np.sin(angle)[..., None], np.cos(angle)[..., None]
  return np.eye(3) + s * cross + (1 - c) * cross @ cross


def rigid_jitter(rng: np.random.Generator, x: np.ndarray, rotation_deg: float,
                 translation: float) -> np.ndarray:
  """``x [..., A, 3]`` rotated about its centroid by N(0, rotation_deg) per axis and
  shifted by N(0, translation^2)."""
  rot = _rotation(np.deg2rad(rotation_deg) * rng.standard_normal(x.shape[:-2] + (3,)))
  center = x.mean(-2, keepdims=True)
  shift = translation * rng.standard_normal(x.shape[:-2] + (1, 3))
  return np.einsum("...ad,...ed->...ae", x - center, rot) + center + shift


def sample_holo(rng: np.random.Generator, ligand: Ligand, num: int
                ) -> tuple[np.ndarray, np.ndarray]:
  """(x1 ``[num, A, 3]`` float32, mode labels ``[num]``) from p1."""
  torsions = np.asarray([[_ANGLE[s] for s in p] for p in HOLO_PATTERNS])
  weights = np.asarray(ligand.weights, np.float64)
  labels = rng.choice(len(weights), num, p=weights / weights.sum())
  s = ligand.settings
  x = nerf_chain(torsions[labels] + s.holo_jitter * rng.standard_normal((num, 5)), s.bond,
                 s.angle)
  return (x + s.holo_noise * rng.standard_normal(x.shape)).astype(np.float32), labels


def sample_apo(rng: np.random.Generator, ligand: Ligand, num: int) -> np.ndarray:
  """x0 ``[num, A, 3]`` float32 from p0."""
  s = ligand.settings
  choice = rng.choice(3, (num, 5), p=np.asarray(s.apo_probs))
  tors = np.asarray([GAUCHE_MINUS, GAUCHE_PLUS, TRANS])[choice]
  x = nerf_chain(tors + s.apo_jitter * rng.standard_normal((num, 5)), s.bond, s.angle)
  x = rigid_jitter(rng, x, s.apo_rotation, s.apo_translation)
  return (x + s.apo_noise * rng.standard_normal(x.shape)).astype(np.float32)


def docked_candidates(rng: np.random.Generator, holo: np.ndarray, num_candidates: int,
                      max_noise: float = 0.35) -> np.ndarray:
  """``[n, K, A, 3]`` float32: K perturbed copies of each ``holo [n, A, 3]`` (noise
  U(0, max_noise) A per candidate on every coordinate, a rigid jitter of 5 deg and .1 A)."""
  x = np.broadcast_to(holo[:, None], (holo.shape[0], num_candidates) + holo.shape[1:])
  scale = rng.uniform(0, max_noise, x.shape[:2] + (1, 1))
  x = rigid_jitter(rng, x, 5.0, 0.1)
  return (x + scale * rng.standard_normal(x.shape)).astype(np.float32)


def nearest_mode(x: jax.Array, ligand: Ligand) -> tuple[jax.Array, jax.Array]:
  """(RMSD to the nearest holo reference ``[...]``, its index ``[...]``) of ``x [..., A, 3]``."""
  rmsd = geometry.kabsch_rmsd(x[..., None, :, :], jnp.asarray(ligand.references))
  return rmsd.min(-1), rmsd.argmin(-1)
