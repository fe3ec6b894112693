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

from jaxlib_papers.core import figures
from jaxlib_papers.ocm import plotting, train
from jaxlib_papers.ocm.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
# Where the heads' error against the exact sigma^2 diag H is measured (plot below).
config.eval.error_timesteps = (10, 25, 50, 100, 200, 400, 700)
print(f"preset {PRESET}: {config.loop.num_steps} DSM steps, "
      f"{config.head_loop.num_steps} head steps")

# %% [markdown]
# ## Train: eps network by DSM, then the OCM / SN / NPR heads on its frozen features

# %%
result = train.run(config, None, verbose=False)
print("DSM loss", round(result.dsm_history[-1]["loss"], 4),
      "| head losses", {k: round(v, 4) for k, v in result.head_history[-1].items()
                        if k.startswith("loss_")})

# %% [markdown]
# ## Samples at K = 10 steps (DDPM sampler) over the true density

# %%
figures.show(plotting.samples_on_density(result, num_k=10))

# %% [markdown]
# ## Covariance error against t (in h-space, h = sigma_t^2 diag H)

# %%
figures.show(plotting.head_error_figure(result))  # measured at config.eval.error_timesteps

# %% [markdown]
# ## NELBO per method (nats/dim, K-step variational bound)

# %%
for num_k, row in result.nelbo.items():
  print(f"K = {num_k}")
  for name, value in sorted(row.items(), key=lambda kv: -kv[1]):
    print(f"  {name:>10s}: {value:8.4f}   MMD^2 {result.mmd[num_k][name]:.2e}")
figures.show(plotting.nelbo_figure(result, num_k=10))
