"""The core's own reproduction check: closed-form answers the shared pieces must hit.

* Entropic OT between two Gaussians (the static Schrodinger bridge): ott-jax Sinkhorn on a
  fine discretisation against the closed-form cost and cross-covariance.
* Exact W2 (POT) between large Gaussian samples against the Bures formula.
* Euler-Maruyama on an Ornstein-Uhlenbeck process: terminal mean and variance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import metrics, ot, precision, reproduce, sde


def _entropic_gaussian_claim(preset: str) -> reproduce.Claim:
  mean_a, var_a, mean_b, var_b, epsilon = 0.0, 1.0, 1.5, 2.0, 0.8
  n = 300 if preset == "smoke" else 1200
  with precision.enable_x64():
    grid = np.linspace(-9.0, 11.0, n)
    a = np.exp(-(grid - mean_a) ** 2 / (2 * var_a))
    b = np.exp(-(grid - mean_b) ** 2 / (2 * var_b))
    a, b = a / a.sum(), b / b.sum()
    @jax.jit
    def solve(g, a, b):
      out = ot.sinkhorn(g[:, None], g[:, None], a, b, epsilon=epsilon, threshold=1e-10,
                        max_iterations=50_000)
      cross = jnp.sum(out.matrix * (g[:, None] - g @ a) * (g[None, :] - g @ b))
      return out.reg_ot_cost, cross

    cost, cross = (float(v) for v in solve(grid, a, b))
    cost_ref, cross_ref = ot.gaussian_entropic_ot(mean_a, var_a, mean_b, var_b, epsilon)
  err = max(abs(cost - float(cost_ref)), abs(cross - float(cross_ref[0, 0])))
  return reproduce.Claim(
      claim="entropic OT N(0,1)->N(1.5,2), eps=0.8: Sinkhorn cost and Cov[X,Y] match "
            "closed form to 1e-4",
      paper=f"cost {float(cost_ref):.6f}, cov {float(cross_ref[0, 0]):.6f} (closed form)",
      ours=f"cost {cost:.6f}, cov {cross:.6f} (err {err:.1e})",
      holds=err < 1e-4)


def _w2_claim(preset: str, seed: int) -> reproduce.Claim:
  n = 500 if preset == "smoke" else 2000
  rng = np.random.default_rng(seed)
  mean1, mean2 = np.array([0.0, 0.0]), np.array([2.0, -1.0])
  cov1 = np.array([[1.0, 0.3], [0.3, 0.5]])
  cov2 = np.array([[0.7, -0.2], [-0.2, 1.2]])
  x = rng.multivariate_normal(mean1, cov1, size=n)
  y = rng.multivariate_normal(mean2, cov2, size=n)
  ours = metrics.w2(x, y)
  with precision.enable_x64():
    ref = float(metrics.gaussian_w2(mean1, cov1, mean2, cov2))
  return reproduce.Claim(
      claim=f"exact W2 of {n}-point Gaussian samples within 0.1 of the Bures formula",
      paper=f"{ref:.4f} (closed form)", ours=f"{ours:.4f}", holds=abs(ours - ref) < 0.1)


def _ou_claim(preset: str, seed: int) -> reproduce.Claim:
  # dX = -theta X dt + s dW from x0: mean x0 e^{-theta T},
  # var s^2 (1 - e^{-2 theta T}) / (2 theta).
  theta, s, x0, horizon = 1.5, 0.7, 2.0, 1.0
  n = 20_000 if preset == "smoke" else 200_000
  ts = jnp.linspace(0.0, horizon, 201)
  xs = sde.euler_maruyama(lambda t, x, _: -theta * x, s, jnp.full((n, 1), x0), ts,
                          jax.random.key(seed), save_path=False)
  mean, var = float(xs.mean()), float(xs.var())
  mean_ref = x0 * np.exp(-theta * horizon)
  var_ref = s**2 * (1 - np.exp(-2 * theta * horizon)) / (2 * theta)
  tol = 4 * np.sqrt(var_ref / n) + 0.01  # sampling error + O(dt) bias
  holds = abs(mean - mean_ref) < tol and abs(var - var_ref) < 0.05 * var_ref
  return reproduce.Claim(
      claim="Euler-Maruyama on an OU process (200 steps): terminal mean and variance",
      paper=f"mean {mean_ref:.4f}, var {var_ref:.4f} (closed form)",
      ours=f"mean {mean:.4f}, var {var:.4f}", holds=holds)


@reproduce.register("core", cpu_seconds=5)
def check(ctx: reproduce.Context) -> list[reproduce.Claim]:
  return [_entropic_gaussian_claim(ctx.preset), _w2_claim(ctx.preset, ctx.seed),
          _ou_claim(ctx.preset, ctx.seed)]
