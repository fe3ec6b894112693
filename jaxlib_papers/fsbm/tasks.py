"""Tasks: marginals, obstacles, aligned keypoints and latent loaders.

Crowd navigation (official settings): S-tunnel N((-11,-1), 0.5 I) -> N((11,1), 0.5 I)
with two elliptic obstacles 20 (x -/+ 5)^2 + (y -/+ 6)^2 < 90; V-neck
N((-7,0), 0.2 I) -> N((7,0), 0.2 I) with the funnel obstacle 5 x^2 - y^2 < -0.36.
"""

from __future__ import annotations

import pathlib
from typing import Callable, NamedTuple

import numpy as np

from jaxlib_papers.core import datasets

TASKS = ("stunnel", "vneck", "opinion", "latents")


class Gaussian(NamedTuple):
  mean: np.ndarray   # [D]
  var: np.ndarray    # [D] per-dim variance

  def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
    eps = rng.standard_normal((n, self.mean.shape[0]))
    return (self.mean + np.sqrt(self.var) * eps).astype(np.float32)


def marginals(name: str, dim: int = 2):
  """(p0, p1) of a Gaussian task."""
  if name == "stunnel":
    return (Gaussian(np.array([-11.0, -1.0]), np.full(2, 0.5)),
            Gaussian(np.array([11.0, 1.0]), np.full(2, 0.5)))
  if name == "vneck":
    return (Gaussian(np.array([-7.0, 0.0]), np.full(2, 0.2)),
            Gaussian(np.array([7.0, 0.0]), np.full(2, 0.2)))
  if name == "opinion":
    var0 = np.full(dim, 0.25)
    var0[0] = 4.0
    return (Gaussian(np.zeros(dim), var0), Gaussian(np.zeros(dim), np.full(dim, 4.0)))
  raise ValueError(f"task must be one of {TASKS[:3]} for Gaussian marginals, got {name!r}")


def collision(name: str, x):
  """Boolean obstacle test, x: [..., 2] -> [...]. Works on numpy and jax arrays."""
  if name == "stunnel":
    px, py = x[..., 0], x[..., 1]
    c1 = 20.0 * (px - 5.0) ** 2 + (py - 6.0) ** 2 < 90.0
    c2 = 20.0 * (px + 5.0) ** 2 + (py + 6.0) ** 2 < 90.0
    return c1 | c2
  if name == "vneck":
    return 5.0 * x[..., 0] ** 2 - x[..., 1] ** 2 < -0.36
  raise ValueError(f"task {name!r} has no obstacles")


# GSBM's obstacle-cost weights (its stunnel / vneck configs).
OBSTACLE_WEIGHT = {"stunnel": 1500.0, "vneck": 3000.0}
# GSBM's interaction-cost weights beside the obstacle cost: congestion in its stunnel
# config, entropy (the log-density of the population's path marginals) in its vneck config.
CONGESTION_WEIGHT = {"stunnel": 50.0}
ENTROPY_WEIGHT = {"vneck": 8.0}


def obstacle_cost(name: str, x):
  """GSBM's smooth obstacle cost V(x [..., 2]) -> [...] (unweighted).

  S-tunnel: softplus(90 - d1) + softplus(90 - d2) with d_i the ellipse
  functions 20 (x -/+ 5)^2 + (y -/+ 6)^2; V-neck: softplus(-0.36 - (5 x^2 - y^2)).
  Positive inside the obstacles, ~0 away from them.
  """
  import jax  # pylint: disable=g-import-not-at-top
  px, py = x[..., 0], x[..., 1]
  if name == "stunnel":
    d1 = 20.0 * (px - 5.0) ** 2 + (py - 6.0) ** 2
    d2 = 20.0 * (px + 5.0) ** 2 + (py + 6.0) ** 2
    return jax.nn.softplus(90.0 - d1) + jax.nn.softplus(90.0 - d2)
  if name == "vneck":
    return jax.nn.softplus(-0.36 - (5.0 * px**2 - py**2))
  raise ValueError(f"task {name!r} has no obstacles")


def congestion(x, y):
  """GSBM's congestion cost 2 / (1 + |x - y|^2) between samples x, y [..., D] -> [...]."""
  return 2.0 / (1.0 + ((x - y) ** 2).sum(-1))


def interaction_cost(name: str, enabled: bool = True):
  """The kernel's interaction cost C(x, y) of the GSBM-style baseline on ``name``, or None.

  The kernel weights it with the obstacle cost's per-pair weight w (``w (V + C)``), so C
  is GSBM's congestion scaled by its weight relative to the obstacle cost's (S-tunnel:
  50 / 1500): at w = 1500 the state cost is GSBM's 1500 V(x) + 50 congestion(x, y).
  None where GSBM has no congestion cost, or when not ``enabled``.
  """
  if not enabled or name not in CONGESTION_WEIGHT:
    return None
  ratio = CONGESTION_WEIGHT[name] / OBSTACLE_WEIGHT[name]
  return lambda x, y: ratio * congestion(x, y)


def entropy_scale(name: str, enabled: bool = True) -> float:
  """The kernel's ``entropy_scale`` of the GSBM-style baseline on ``name`` (0 = none).

  GSBM's entropy weight relative to its obstacle weight (V-neck: 8 / 3000), since the
  kernel weights E with V by the pair's w: at w = 3000 the state cost is GSBM's
  3000 V(x) + 8 log p_t(x). 0 where GSBM has no entropy cost, or when not ``enabled``.
  """
  if not enabled or name not in ENTROPY_WEIGHT:
    return 0.0
  return ENTROPY_WEIGHT[name] / OBSTACLE_WEIGHT[name]


def state_cost(config):
  """The GSBM-style known-obstacle cost for the kernel, or None.

  ``config.gsbm_obstacle_weight`` > 0 turns it on (GSBM: 1500 S-tunnel, 3000
  V-neck, ``OBSTACLE_WEIGHT``); only crowd tasks have obstacles.
  """
  weight = check_obstacle_weight(config.task, config.gsbm_obstacle_weight)
  if weight == 0:
    return None
  return lambda x: weight * obstacle_cost(config.task, x)


def check_obstacle_weight(task: str, weight: float) -> float:
  """``weight`` as a float if it is a valid GSBM obstacle-cost weight for ``task``
  (>= 0, and > 0 only for a task with obstacles), else ValueError."""
  weight = float(weight)
  if weight < 0:
    raise ValueError(f"config.gsbm_obstacle_weight must be >= 0, got {weight}")
  if weight > 0 and task not in OBSTACLE_WEIGHT:
    raise ValueError(f"config.gsbm_obstacle_weight > 0 needs a task with obstacles "
                     f"{sorted(OBSTACLE_WEIGHT)}, got task {task!r}")
  return weight


def collision_fn(name: str) -> Callable | None:
  if name in ("stunnel", "vneck"):
    return lambda x: collision(name, x)
  return None


def collision_rate(name: str, paths) -> float:
  """Fraction of trajectories that touch an obstacle at any saved time.

  Args:
    paths: [S, B, 2] trajectories (time first).
  """
  hit = np.asarray(collision(name, np.asarray(paths)))
  return float(np.mean(np.any(hit, axis=0)))


def generate_keypoints(name: str, num: int, num_steps: int, *, seed: int = 0,
                       eps: float = 1e-3, jitter: float = 0.15) -> np.ndarray:
  """Aligned keypoint trajectories without the official files.

  Endpoints are sampled from the marginals and paired by exact OT (POT); each
  pair is joined by an analytic obstacle-avoiding path: the S-tunnel path
  bends by +/-7 in y (a sine over time) to pass above the left and below the
  right obstacle; the V-neck path scales y by 0.25 + 0.75 |x| / 7 so it shrinks into
  the neck. A small Brownian-bridge jitter makes the set look like observed data.

  Returns:
    [num, num_steps, 2] float32 on the grid linspace(eps, 1 - eps, num_steps).
  """
  from jaxlib_papers.core import ot as core_ot  # host POT
  rng = np.random.default_rng(seed)
  p0, p1 = marginals(name)
  x0, x1 = p0.sample(rng, num), p1.sample(rng, num)
  plan = core_ot.exact_coupling(x0, x1)
  x1 = x1[np.argmax(plan, axis=1)]
  t = np.linspace(eps, 1.0 - eps, num_steps)[None, :, None]
  lin = (1.0 - t) * x0[:, None] + t * x1[:, None]                 # [K, S, 2]
  if name == "stunnel":
    bend = 7.0 * np.sin(2.0 * np.pi * t[..., 0])
    path = np.stack([lin[..., 0], lin[..., 1] + bend], axis=-1)
  elif name == "vneck":
    # Keeps a quarter of the spread in the neck, so the per-time std of the
    # keypoints never collapses (G divides by it) while |y| stays < 0.6 at x=0.
    shrink = np.clip(0.25 + 0.75 * np.abs(lin[..., 0]) / 7.0, 0.0, 1.0)
    path = np.stack([lin[..., 0], lin[..., 1] * shrink], axis=-1)
  else:
    raise ValueError(f"no analytic keypoint path for task {name!r}")
  dw = rng.standard_normal(path.shape) * np.sqrt(1.0 / num_steps)
  walk = np.cumsum(dw, axis=1)
  bridge = walk - t * walk[:, -1:]
  if name == "vneck":
    bridge[..., 1] *= shrink
  return (path + jitter * bridge).astype(np.float32)


def load_keypoints(path: str | pathlib.Path) -> np.ndarray:
  """Loads a [K, S, D] keypoint array from .npy, .npz (one array) or the official PyTorch
  .pt (read without PyTorch by ``core.datasets.load_pt``)."""
  path = pathlib.Path(path)
  if not path.exists():
    raise ValueError(f"keypoints_path {str(path)!r} does not exist")
  if path.suffix == ".pt":
    arr = datasets.load_pt(path)
  else:
    arr = np.load(path)
  if isinstance(arr, np.lib.npyio.NpzFile):
    arr = arr[arr.files[0]]
  arr = np.asarray(arr)
  if arr.ndim != 3:
    raise ValueError(f"keypoints_path {str(path)!r} must hold a [K, S, D] array, got "
                     f"{arr.shape}")
  bad = np.argwhere(~np.isfinite(arr))
  if bad.size:
    k, s, d = (int(i) for i in bad[0])
    raise ValueError(f"keypoints_path {str(path)!r}: {len(bad)} NaN/Inf value(s), the first "
                     f"at keypoint {k}, time {s}, dimension {d} ({arr[k, s, d]}); the "
                     "feedback term needs finite keypoints")
  return arr.astype(np.float32)


def split_keypoints(keypoints: np.ndarray, num_feedback: int, seed: int = 0):
  """Random split into (feedback [num_feedback, S, D], held_out [rest, S, D])."""
  if not 2 <= num_feedback <= keypoints.shape[0]:
    raise ValueError(f"num_feedback must be in [2, {keypoints.shape[0]}], got {num_feedback}")
  perm = np.random.default_rng(seed).permutation(keypoints.shape[0])
  return keypoints[perm[:num_feedback]], keypoints[perm[num_feedback:]]


class LatentPairs(NamedTuple):
  x0: np.ndarray  # [n0, D] source latents
  x1: np.ndarray  # [n1, D] target latents


def load_latents(source_path: str, target_path: str) -> LatentPairs:
  """Precomputed image latents (e.g. FFHQ ALAE codes), one .npy [n, D] per side."""
  arrs = []
  for name, p in (("source", source_path), ("target", target_path)):
    if not p or not pathlib.Path(p).exists():
      raise ValueError(f"latents {name} path {p!r} does not exist")
    a = np.load(p)
    if a.ndim != 2 or not np.all(np.isfinite(a)):
      raise ValueError(f"latents {name} must be a finite [n, D] array, got {a.shape}")
    arrs.append(a.astype(np.float32))
  if arrs[0].shape[1] != arrs[1].shape[1]:
    raise ValueError(f"latent dims differ: {arrs[0].shape} vs {arrs[1].shape}")
  return LatentPairs(*arrs)


def directional_similarity(x, num_pairs: int = 1000, seed: int = 0) -> float:
  """Mean directional similarity 1 - angle / pi of random pairs of centred x [n, D].

  1 means perfectly polarised (all along one direction), 0.5 uncorrelated.
  """
  x = np.asarray(x, np.float64)
  x = x - x.mean(axis=0, keepdims=True)
  rng = np.random.default_rng(seed)
  i, j = rng.integers(0, len(x), num_pairs), rng.integers(0, len(x), num_pairs)
  a = x[i] / np.linalg.norm(x[i], axis=1, keepdims=True)
  b = x[j] / np.linalg.norm(x[j], axis=1, keepdims=True)
  cos = np.clip(np.sum(a * b, axis=1), -1.0, 1.0)
  return float(np.mean(1.0 - np.arccos(cos) / np.pi))
