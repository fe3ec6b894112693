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
# # FSBM: Feedback Schrodinger Bridge Matching
#
# Theodoropoulos et al., *Feedback Schrodinger Bridge Matching* (ICLR 2025). A few
# aligned trajectories ("keypoints") guide a Schrodinger bridge between two crowds
# through an S-shaped tunnel, without the solver ever being told where the obstacles are;
# then the same kernel depolarises 100-dimensional opinions under a polarising
# mean-field drift.
#
# Each alternation: (R-step) fit one Gaussian path per endpoint pair by conditional
# stochastic optimal control, with the feedback cost G (distance to the matched keypoint
# trajectory, relative to the start) — one jitted, vmapped solve over all pairs; then
# (M-step) regress a vector field on the fitted paths' drifts. tau = 0 turns the feedback
# off (DSBM-like baseline) in the very same compiled program.

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
import numpy as np

from jaxlib_papers.core import figures
from jaxlib_papers.fsbm import plotting, tasks, train
from jaxlib_papers.fsbm.configs import default

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = default.task_config("stunnel", PRESET)
print(f"preset {PRESET}: {config.loop.num_steps} alternations, B={config.batch_size} "
      f"pairs, {config.csoc.num_iters} CondSOC iterations, {config.match.steps} M-steps")

# %% [markdown]
# ## Train FSBM (tau = 100) and the unguided baseline (tau = 0)
# The embedded keypoints are generated (exact-OT endpoint pairs joined by an analytic
# path around the obstacles); to use FSBM's official ones instead (fetched from the
# official repository, checked by sha256, read without PyTorch), set
# `config.keypoints_path = str(datasets.fetch("fsbm/kp_traj_stunnel.pt"))` with
# `from jaxlib_papers.core import datasets`.

# %%
fsbm, base = train.run(config, taus=(config.tau, 0.0), verbose=False).runs
for res in (fsbm, base):
  ev = res.evaluation
  print(f"tau={res.tau:g}: collision rate {ev.collision_rate:.3f}, "
        f"W2 {ev.w2:.3f}, MMD {ev.mmd:.4f}")

# %% [markdown]
# ## Trajectories (grey: obstacles, black: feedback keypoints)

# %%
figures.show(plotting.trajectories_figure("stunnel", fsbm, base))  # as the check saves it

# %% [markdown]
# ## Collision rate of the forward model after each alternation

# %%
figures.show(plotting.collision_history_figure((fsbm, base), ("FSBM", "tau = 0")))

# %% [markdown]
# ## Opinion depolarisation (D = 100)
# A population of 100-dimensional opinions moves under a *polarising* mean-field drift:
# everyone is pushed along the population's signed mean opinion, so the crowd splits into
# two opposite camps. The keypoints are non-polarised trajectories (generated: exact-OT
# endpoint pairs joined by a straight line plus Brownian-bridge jitter). Polarisation is
# measured by the index mean |2 d_ij - 1| of the pairwise directional similarity
# d_ij = 1 - angle(x_i, x_j) / pi (0: no camps, 1: two antipodal camps). At smoke size the
# models are barely trained; run with `JAXLIB_PAPERS_DEMO_PRESET=cpu` for the real picture.

# %%
op_config = default.task_config("opinion", PRESET)
op_fsbm, op_base = train.run(op_config, taus=(op_config.tau, 0.0), verbose=False).runs
p0, _ = tasks.marginals("opinion", op_config.dim)
ref_pol = train.reference_polarisation(op_config, p0.sample(np.random.default_rng(0), 500),
                                       jax.random.key(0))
figures.show(plotting.opinion_figure(op_fsbm, op_base, ref_pol))  # as the check saves it
for res in (op_fsbm, op_base):
  ev = res.evaluation
  print(f"tau={res.tau:g}: max polarisation {ev.polarisation_max:.3f}, "
        f"terminal {ev.polarisation:.3f}, MMD {ev.mmd:.4f}")
