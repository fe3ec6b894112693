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
# # Unbalanced flow matching: couplings that trade sample efficiency for accuracy
#
# Corso, Somnath, Getz, Barzilay, Jaakkola, Krause, *Composing Unbalanced Flows for
# Flexible Docking and Relaxation* (ICLR 2025). Flow matching regresses a velocity on
# x1 - x0 for pairs (x0, x1) of a coupling q. Unbalanced FM lets q's marginals differ from
# p0 and p1: keeping only pairs whose cost is below a cutoff delta makes the regression
# target simpler (short, nearly straight paths) but the model then learns from q0, not
# p0, while sampling still starts from p0. Small delta: few accepted pairs (acceptance Z,
# effective sample size e^{-D2(q0 || p0)}) and a marginal error; large delta: the plain
# independent coupling.
#
# The toy: an 8-atom ligand chain moving from apo conformers (p0) to holo conformers
# (p1, four torsion patterns) in a pocket, the cost being the Kabsch RMSD.

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

import numpy as np

from jaxlib_papers.core import figures
from jaxlib_papers.unbalanced_fm import plotting, problems, train
from jaxlib_papers.unbalanced_fm.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
if PRESET == "smoke":   # seconds on CPU: the relaxation stage runs at the larger presets
  config.relax.steps = 0
print(f"preset {PRESET}: {config.num_seeds} seeds, pool {config.coupling.pool}, docking "
      f"cutoffs {list(config.dock.deltas)}, {config.dock.steps} steps")

# %% [markdown]
# ## One run: couplings, the docking flow per cutoff, the relaxation flow
# Every (cutoff, energy weight, seed) member trains in one compiled program; the cutoffs
# of a seed share its candidate batches and its B x B cost matrix.

# %%
result = train.run(config, None)
c = result.coupling
for i, d in enumerate(c["deltas"]):
  print(f"delta {d:>4}: Z {np.mean(c['acceptance'], 0)[i]:.3f}  D2(q0||p0) "
        f"{np.mean(c['d2_0'], 0)[i]:.2f}  TV(q0,p0) {np.mean(c['tv_0'], 0)[i]:.2f}  "
        f"E_q[c^2] {np.mean(c['cost2'], 0)[i]:.2f}")

# %% [markdown]
# ## Acceptance and marginal error against the cutoff
# (problem A, right: the reweighted modes, whose acceptance has a closed form.)

# %%
fig = plotting.coupling_figure(result)
figures.show(fig)

# %% [markdown]
# ## The flow from p0: success, class TV against p1 and validity against the cutoff

# %%
fig = plotting.flow_figure(result)
figures.show(fig)
d = result.dock
for delta in dict.fromkeys(d["delta"]):
  pick = np.asarray(d["delta"]) == delta
  print(f"delta {delta}: success {np.mean(np.asarray(d['success'])[pick]):.2f}, "
        f"TV {np.mean(np.asarray(d['tv'])[pick]):.2f}")

# %% [markdown]
# ## Apo, generated and holo ligands in the pocket (x-y projection)

# %%
fig = plotting.ligands_figure(result.samples, problems.make_ligand().pocket,
                              result.samples.get("generated_deltas", []))
figures.show(fig)
if result.relax:
  print("relaxation:", {k: np.round(v, 3).tolist() for k, v in result.relax.items()})
