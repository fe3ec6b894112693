"""Links of a Gaussian single-index model and their exponents, as data.

y = f(z) (+ noise_std * eps for a link with additive noise), z = <theta*, x>, x ~ N(0, I_d).
With the normalised Hermite polynomials h_j = He_j / sqrt(j!):

* information exponent k* = min{j : E[y h_j(z)] != 0};
* generative exponent s* = min{j : E[zeta_j(y)^2] > 0}, zeta_j(y) = E[h_j(z) | y]
  (Damian, Pillaud-Vivien, Lee, Bruna 2024): the smallest k* over label transforms, s* <= k*.

A :class:`Link` carries its function, its declared exponents and a label transform T that
attains s* (E[T(y) h_{s*}(z)] != 0). :func:`measure_exponents` estimates both kinds of
coefficient by Monte Carlo on the host (float64) and :func:`check_link` raises a
``ValueError`` naming the link and the exponent when a declaration disagrees with them.
A user adds a link by building a ``Link`` (jnp functions) and passing it to ``check_link``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


class Link(NamedTuple):
  """A link y = function(z) and its exponents.

  Attributes:
    name: a short name ("he3").
    function: jnp-traceable z -> y (noiseless), elementwise.
    information_exponent: declared k* >= 1.
    generative_exponent: declared s* in [1, k*].
    transform: jnp-traceable label transform T(y) with E[T h_{s*}] != 0 (and > 0 for even
      s*, so the even-degree correlation loss pulls w towards +-theta*).
    additive_noise: whether the experiment's Gaussian label noise is added (False for a
      binary link, whose label stays binary).
  """
  name: str
  function: Callable[[jnp.ndarray], jnp.ndarray]
  information_exponent: int
  generative_exponent: int
  transform: Callable[[jnp.ndarray], jnp.ndarray]
  additive_noise: bool = True


def hermite_coefficients(degree: int) -> np.ndarray:
  """Power-series coefficients c_k of h_degree = He_degree / sqrt(degree!), k = 0..degree."""
  if int(degree) < 0:
    raise ValueError(f"degree must be an integer >= 0, got {degree}")
  previous, current = np.zeros(1), np.ones(1)   # He_{-1} = 0, He_0 = 1
  for n in range(int(degree)):                    # He_{n+1} = z He_n - n He_{n-1}
    shifted = np.concatenate([[0.0], current])
    previous, current = current, shifted - n * np.pad(previous, (0, 2))[:n + 2]
  return current / math.sqrt(math.factorial(int(degree)))


def hermite(degree: int, z: ArrayLike) -> jnp.ndarray:
  """h_degree(z) = He_degree(z) / sqrt(degree!) by the three-term recurrence."""
  z = jnp.asarray(z)
  previous, current = jnp.zeros_like(z), jnp.ones_like(z)
  for n in range(int(degree)):
    previous, current = current, z * current - n * previous
  return current / math.sqrt(math.factorial(int(degree)))


def _he(degree: int) -> Callable[[jnp.ndarray], jnp.ndarray]:
  scale = math.sqrt(math.factorial(degree))
  return lambda z: scale * hermite(degree, z)   # unnormalised He_degree: sd sqrt(degree!)


# sign(z (z^2 - 2 ln 2)): E[y h1] = 4 phi(a) - 2 phi(0) = 0 at a^2 = 2 ln 2, so k* = 3; a
# binary label admits only affine transforms, so s* = k* = 3.
_BIN3_ROOT2 = 2.0 * math.log(2.0)

LINKS: dict[str, Link] = {
    "he2": Link("he2", _he(2), 2, 2, lambda y: y),
    "he3": Link("he3", _he(3), 3, 1, jnp.sign),
    "he4": Link("he4", _he(4), 4, 2, lambda y: -jnp.sign(y)),
    "bin3": Link("bin3", lambda z: jnp.sign(z * (z * z - _BIN3_ROOT2)), 3, 3, lambda y: y,
                 additive_noise=False),
}


def get_link(name: str) -> Link:
  if name not in LINKS:
    raise ValueError(f"link must be one of {sorted(LINKS)}, got {name!r}")
  return LINKS[name]


def labels(link: Link, z: ArrayLike, noise: ArrayLike, noise_std: float) -> jnp.ndarray:
  """y = f(z) + noise_std * noise (noise dropped for a link without additive noise)."""
  y = link.function(jnp.asarray(z))
  return y + noise_std * jnp.asarray(noise) if link.additive_noise else y


class Measured(NamedTuple):
  """Monte Carlo coefficients for j = 1..max_degree (index j - 1), float64.

  Attributes:
    label: E[y h_j(z)], with standard errors label_se.
    transformed: E[T(y) h_j(z)], with standard errors transformed_se.
    zeta_sq: E[zeta_j(y)^2] by equal-count bins of y, bias-corrected, with null sd
      zeta_null_sd (the estimator's sd when zeta_j = 0).
    label_sd: sd(y) (what the vanilla algorithm divides y by).
  """
  label: np.ndarray
  label_se: np.ndarray
  transformed: np.ndarray
  transformed_se: np.ndarray
  zeta_sq: np.ndarray
  zeta_null_sd: np.ndarray
  label_sd: float


def _binned_zeta_sq(y: np.ndarray, h: np.ndarray, num_bins: int) -> tuple[float, float]:
  order = np.argsort(y, kind="stable")
  groups = np.array_split(h[order], num_bins)
  n = len(y)
  stat = sum(len(g) / n * (g.mean() ** 2 - g.var(ddof=1) / len(g)) for g in groups)
  null_sd = math.sqrt(2.0 * num_bins) / n * float(h.var())
  return float(stat), null_sd


def measure_exponents(link: Link, *, noise_std: float = 0.0, num_samples: int = 200_000,
                      max_degree: int | None = None, num_bins: int = 64,
                      seed: int = 0) -> Measured:
  """Monte Carlo Hermite coefficients of ``link`` (host, float64, fixed seed)."""
  max_degree = int(max_degree or max(link.information_exponent, 1) + 1)
  rng = np.random.default_rng(seed)
  z = rng.standard_normal(num_samples)
  noise = rng.standard_normal(num_samples)
  y = np.asarray(labels(link, z, noise, noise_std), np.float64)
  t = np.asarray(link.transform(jnp.asarray(y)), np.float64)
  if not (np.all(np.isfinite(y)) and np.all(np.isfinite(t))):
    raise ValueError(f"link {link.name!r}: function or transform gives NaN or Inf")
  rows = {k: [] for k in Measured._fields[:-1]}
  for j in range(1, max_degree + 1):
    h = np.asarray(hermite(j, z), np.float64)
    for key, v in (("label", y), ("transformed", t)):
      rows[key].append(np.mean(v * h))
      rows[key + "_se"].append(np.std(v * h) / math.sqrt(num_samples))
    stat, null_sd = _binned_zeta_sq(y, h, num_bins)
    rows["zeta_sq"].append(stat)
    rows["zeta_null_sd"].append(null_sd)
  return Measured(**{k: np.asarray(v) for k, v in rows.items()}, label_sd=float(y.std()))


def _nonzero(value: float, se: float) -> bool:
  return abs(value) > 5.0 * se + 0.02


def _first(flags: list[bool]) -> int | None:
  return next((j + 1 for j, f in enumerate(flags) if f), None)


def check_link(link: Link, *, noise_std: float = 0.0, num_samples: int = 200_000,
               seed: int = 0) -> Measured:
  """Checks the declared exponents of ``link`` against Monte Carlo coefficients.

  Returns:
    The :class:`Measured` coefficients (``label_sd`` is the vanilla label scale).

  Raises:
    ValueError: naming the link and what disagrees: k* (the first j with
      E[y h_j] != 0), s* (the first j with E[zeta_j^2] > 0), the transform (E[T h_{s*}]
      zero, or negative at even s*), or s* > k*.
  """
  k, s = link.information_exponent, link.generative_exponent
  if not (isinstance(k, int) and isinstance(s, int) and 1 <= s <= k):
    raise ValueError(f"link {link.name!r}: need integers 1 <= generative_exponent <= "
                     f"information_exponent, got s* = {s!r}, k* = {k!r}")
  m = measure_exponents(link, noise_std=noise_std, num_samples=num_samples,
                        max_degree=k + 2, seed=seed)
  first_k = _first([_nonzero(v, e) for v, e in zip(m.label, m.label_se)])
  if first_k != k:
    raise ValueError(
        f"link {link.name!r}: declared information_exponent k* = {k}, but the Monte Carlo "
        f"Hermite coefficients E[y h_j] for j = 1..{k + 2} are "
        f"{np.round(m.label, 3).tolist()} (se {np.round(m.label_se, 3).tolist()}): the "
        f"first nonzero one is at j = {first_k or f'> {k + 2}'}")
  first_s = _first([v > 8.0 * sd + 0.01 for v, sd in zip(m.zeta_sq, m.zeta_null_sd)])
  if first_s != s:
    raise ValueError(
        f"link {link.name!r}: declared generative_exponent s* = {s}, but the Monte Carlo "
        f"E[zeta_j(y)^2] for j = 1..{k + 2} are {np.round(m.zeta_sq, 4).tolist()}: the "
        f"first nonzero one is at j = {first_s or f'> {k + 2}'}")
  coef, se = m.transformed[s - 1], m.transformed_se[s - 1]
  if not _nonzero(coef, se) or (s % 2 == 0 and coef < 0):
    raise ValueError(
        f"link {link.name!r}: its transform must have E[T(y) h_{s}(z)] != 0 (and > 0 for "
        f"even s* = {s}, else negate it); measured {coef:.3f} +- {se:.3f}")
  return m
