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

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from jaxlib_papers.core import datasets
from jaxlib_papers.ruot import data, train
from jaxlib_papers.ruot.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
config.data.hold_out = 2
# The official gene data (DeepRUOT's simulation_gene_data.csv, fetched from its pinned
# commit and checked by sha256, then cached); offline, the fetcher says where to put it.
try:
  gene_csv = datasets.fetch("ruot/simulation_gene_data.csv")
  print("official gene data, cells per time:", data.load_csv(gene_csv).counts.tolist())
except datasets.DataUnavailable as e:
  gene_csv = None
  print(e)
# smoke trains on our small simulator sample (seconds); cpu/full on the official file.
if PRESET != "smoke":
  config.data.source = "csv" if gene_csv else "simulator"
  config.data.path = str(gene_csv or "")
results = train.run(config, None)
snaps = results["data"]
print("stage seconds:", {k: round(v, 1) for k, v in results["timings"].items()})

# %% [markdown]
# ## Trajectories over the snapshots
# Data as dots, the learned ODE particles (size = weight) as crosses, a few particle paths.

# %%
nets, params = results["networks"], results["params"]
p0 = jax.tree.map(lambda a: a[0], params)
path_times = np.linspace(snaps.times[0], snaps.times[-1], 41)
paths, path_log_w = train.make_pushforward(nets, list(path_times), float(config.ode.dt))(
    params, jnp.asarray(snaps.xs[0]))
paths, path_log_w = np.asarray(paths[0]), np.asarray(path_log_w[0])
xs, log_ws = results["ode"]
colors = plt.cm.viridis(np.linspace(0, 1, len(snaps.times)))
fig, ax = plt.subplots(figsize=(6, 5))
for k, (t, x) in enumerate(zip(snaps.times, snaps.xs)):
  held = results["held_out_time"] == t
  ax.scatter(x[:, 0], x[:, 1], s=4, color=colors[k], alpha=0.35,
             label=f"data t={t:g}" + (" (held out)" if held else ""))
for i in range(0, paths.shape[1], max(1, paths.shape[1] // 25)):
  ax.plot(paths[:, i, 0], paths[:, i, 1], color="gray", lw=0.6, alpha=0.6)
w_end = np.exp(log_ws[0, -1])
ax.scatter(xs[0, -1, :, 0], xs[0, -1, :, 1], s=60 * w_end / w_end.max(), marker="x",
           color="red", label="model t=end")
ax.set_xlabel("x1")
ax.set_ylabel("x2")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# ## Learned growth field g(t, x)
# The simulator's division rate rises with x2; the learned g should too.

# %%
grid_1, grid_2 = np.meshgrid(np.linspace(0, 2.2, 60), np.linspace(0, 2.3, 60))
grid = jnp.asarray(np.stack([grid_1.ravel(), grid_2.ravel()], 1), jnp.float32)
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, t in zip(axes, (1.0, 3.0)):
  g = np.asarray(nets.growth(p0, t, grid)).reshape(grid_1.shape)
  im = ax.contourf(grid_1, grid_2, g, levels=30, cmap="rainbow")
  ax.set_title(f"g(t={t:g}, x)")
  ax.set_xlabel("x1")
  ax.set_ylabel("x2")
  fig.colorbar(im, ax=ax)
plt.show()

# %% [markdown]
# ## Mass over time and the held-out time point

# %%
rows = results["summary"]
times = [r["time"] for r in rows]
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
axes[0].plot(path_times, np.exp(path_log_w).sum(1), label="model mass sum_i w_i")
axes[0].plot(snaps.times, snaps.relative_mass, "s", label="N_k / N_0 (data)")
axes[0].axhline(1.0, ls=":", color="k", label="no growth")
axes[0].set_xlabel("t")
axes[0].legend()
held = int(config.data.hold_out)
y = snaps.xs[held]
axes[1].scatter(y[:, 0], y[:, 1], s=5, alpha=0.4, label=f"data t={snaps.times[held]:g} (held out)")
w = np.exp(log_ws[0, held])
axes[1].scatter(xs[0, held, :, 0], xs[0, held, :, 1], s=40 * w / w.max(), marker="x",
                color="red", label="model prediction")
axes[1].legend(fontsize=8)
plt.show()
for r in rows:
  print(f"t={r['time']:g}: W1 {r['w1']:.3f}  W2 {r['w2']:.3f}  TMV {r['tmv']:.3f} "
        f"(no growth {r['tmv_no_growth']:.3f})")
