# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # OCM: optimal diagonal covariance matching for diffusion models
#
# Ou et al., *Improving Probabilistic Diffusion Models With Optimal Diagonal Covariance
# Matching* (ICLR 2025). The reverse step of a diffusion model needs the covariance of
# x0 given x_t; second-order Tweedie gives it from the Hessian of log q_t:
# Cov[x0 | x_t] = (sigma_t^4 H + sigma_t^2 I) / abar_t. OCM learns the diagonal of
# sigma_t^2 H with a small head on a frozen eps network, regressing onto the unbiased
# Rademacher-probe target sigma_t^2 v * (d/dx (s_theta . v)) (one jvp of the network).
#
# On a 2-D 8-mode Gaussian mixture the exact Hessian is known in closed form, so we can
# compare every method against the exact ("oracle") covariance:
# DDPM's fixed beta~ and beta, Analytic-DPM (a scalar per t), SN-DPM, NPR-DPM and OCM.

# %%
# On Colab: install the suite (a no-op in a checkout, in CI, or where it is installed).
import importlib.util
import subprocess
import sys

REPO_URL = "https://github.com/jaxlib-papers/jaxlib-papers"  # a fork changes only this
if importlib.util.find_spec("jaxlib_papers") is None:
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"git+{REPO_URL}"], check=True)

# %%
import os

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from jaxlib_papers.ocm import gmm, train
from jaxlib_papers.ocm.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
# Where the heads' error against the exact sigma^2 diag H is measured (plot below).
config.eval.error_timesteps = (10, 25, 50, 100, 200, 400, 700)
print(f"preset {PRESET}: {config.loop.num_steps * config.dsm.steps_per_call} DSM steps, "
      f"{config.head_loop.num_steps * config.heads.steps_per_call} head steps")

# %% [markdown]
# ## Train: eps network by DSM, then the OCM / SN / NPR heads on its frozen features

# %%
results = train.run(config, None, verbose=False)
print("DSM loss", round(results["dsm_history"][-1]["loss"], 4),
      "| head losses", {k: round(v, 4) for k, v in results["head_history"][-1].items()
                        if k.startswith("loss_")})

# %% [markdown]
# ## Samples at K = 10 steps (DDPM sampler) over the true density

# %%
mix = results["mixture"]
grid = np.linspace(-1.2, 1.2, 120)
xx, yy = np.meshgrid(grid, grid)
density = np.exp(np.asarray(gmm.log_prob(mix, jnp.asarray(np.stack([xx, yy], -1),
                                                          jnp.float32))))
samples = results["samples"][10]
fig, axes = plt.subplots(1, len(samples), figsize=(2.3 * len(samples), 2.5))
for ax, (name, x) in zip(axes, samples.items()):
  ax.contourf(xx, yy, density, levels=12, cmap="Greys")
  ax.scatter(x[:600, 0], x[:600, 1], s=1.5, c="tab:red", alpha=0.6)
  ax.set_title(name, fontsize=9)
  ax.set_xticks([]), ax.set_yticks([])
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Covariance error against t (in h-space, h = sigma_t^2 diag H)

# %%
errors = results["head_error"]   # measured by train.run at config.eval.error_timesteps
ts = sorted(errors)
plt.figure(figsize=(4.5, 3))
for name in errors[ts[0]]:
  plt.semilogy(ts, [errors[t][name] for t in ts], "o-", label=name)
plt.xlabel("t")
plt.ylabel("E ||h - sigma^2 diag H||^2 / d")
plt.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## NELBO per method (nats/dim, K-step variational bound)

# %%
for num_k, row in results["nelbo"].items():
  print(f"K = {num_k}")
  for name, value in sorted(row.items(), key=lambda kv: -kv[1]):
    print(f"  {name:>10s}: {value:8.4f}   MMD^2 {results['mmd'][num_k][name]:.2e}")
plt.figure(figsize=(4.5, 3))
row = results["nelbo"][10]
names = [n for n in row if n != "beta_tilde"]   # beta~ is off the scale
plt.bar(names, [row[n] for n in names])
plt.ylabel("NELBO (nats/dim), K = 10")
plt.xticks(rotation=30)
plt.tight_layout()
plt.show()
