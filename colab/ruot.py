# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # DeepRUOT in JAX: stochastic dynamics with growth from snapshots
#
# Zhang, Li, Zhou, *Learning Stochastic Dynamics from Snapshots through Regularized
# Unbalanced Optimal Transport* (ICLR 2025). Weighted particles follow
# `dx/dt = v(t, x)`, `d ln w/dt = g(t, x)`; v and g are fitted to unnormalised snapshots
# (cell counts grow) with an OT loss and a local mass loss, then a score network s gives the
# stochastic dynamics `dX = (v + grad s) dt + sigma dW`. Every stage is one jitted
# `lax.scan`, and N seeds train together under `jax.vmap`.
#
# Here: the time point t = 2 held out of training and predicted; the smoke run trains on our
# gene-network simulator, larger presets on DeepRUOT's official gene data.

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
import numpy as np

from jaxlib_papers.core import datasets, figures
from jaxlib_papers.ruot import data, flows, plotting, train
from jaxlib_papers.ruot.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
config.data.hold_out = 2
# smoke trains on our small simulator sample (seconds); cpu/full on DeepRUOT's official
# gene data (simulation_gene_data.csv, fetched from its pinned commit and checked by
# sha256, then cached), or on the simulator when it cannot be had (offline).
if PRESET != "smoke":
  try:
    gene_csv = datasets.fetch("ruot/simulation_gene_data.csv")
    print("official gene data, cells per time:", data.load_csv(gene_csv).counts.tolist())
    config.data.source, config.data.path = "csv", str(gene_csv)
  except datasets.DataUnavailable:
    print("official gene data unavailable (offline): training on our simulator")
    config.data.source = "simulator"
result = train.run(config, None)
snaps = result.data
print("stage seconds:", {k: round(v, 1) for k, v in result.timings.items()})

# %% [markdown]
# ## Trajectories over the snapshots
# Data as dots, the learned ODE particles (size = weight) as crosses, a few particle paths.

# %%
path_times = np.linspace(snaps.times[0], snaps.times[-1], 41)
paths, path_log_w = flows.make_pushforward(result.networks, list(path_times),
                                           float(config.ode.dt))(
    result.params, jnp.asarray(snaps.xs[0]))
paths, path_log_w = np.asarray(paths[0]), np.asarray(path_log_w[0])
figures.show(plotting.trajectories_figure(result, paths))

# %% [markdown]
# ## Learned growth field g(t, x)
# The simulator's division rate rises with x2; the learned g should too.

# %%
figures.show(plotting.growth_figure(result, times=(1.0, 3.0)))

# %% [markdown]
# ## Mass over time and the held-out time point

# %%
figures.show(plotting.mass_figure(result, path_times, path_log_w, int(config.data.hold_out)))
for r in result.summary:
  print(f"t={r['time']:g}: W1 {r['w1']:.3f}  W2 {r['w2']:.3f}  TMV {r['tmv']:.3f} "
        f"(no growth {r['tmv_no_growth']:.3f})")
