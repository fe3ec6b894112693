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
# through an S-shaped tunnel, without the solver ever being told where the obstacles are.
#
# Each alternation: (R-step) fit one Gaussian path per endpoint pair by conditional
# stochastic optimal control, with the feedback cost G (distance to the matched keypoint
# trajectory, relative to the start) — one jitted, vmapped solve over all pairs; then
# (M-step) regress a vector field on the fitted paths' drifts. tau = 0 turns the feedback
# off (DSBM-like baseline) in the very same compiled program.

# %%
import os

import matplotlib.pyplot as plt

from jaxlib_papers.fsbm import plotting, train
from jaxlib_papers.fsbm.configs import default

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = default.task_config("stunnel", PRESET)
print(f"preset {PRESET}: {config.loop.num_steps} alternations, B={config.batch_size} "
      f"pairs, {config.csoc.num_iters} CondSOC iterations, {config.match.steps} M-steps")

# %% [markdown]
# ## Train FSBM (tau = 100) and the unguided baseline (tau = 0)
# The embedded keypoints are generated (exact-OT endpoint pairs joined by an analytic
# path around the obstacles); set `config.keypoints_path` to the official
# `kp_traj_stunnel.npy` to use those instead.

# %%
fsbm, base = train.run_in_memory(config, (config.tau, 0.0), verbose=False)
for res in (fsbm, base):
  print(f"tau={res['tau']:g}: collision rate {res['collision_rate']:.3f}, "
        f"W2 {res['w2']:.3f}, MMD {res['mmd']:.4f}")

# %% [markdown]
# ## Trajectories (grey: obstacles, black: feedback keypoints)

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 5))
for ax, res, name in ((axes[0], fsbm, "FSBM"), (axes[1], base, "tau = 0")):
  plotting.plot_trajectories(ax, "stunnel", res["paths"], res["feedback_keypoints"],
                             title=f"{name}: collision {res['collision_rate']:.2f}")
plt.show()

# %% [markdown]
# ## Collision rate of the forward model after each alternation

# %%
fig, ax = plt.subplots(figsize=(5, 3))
for res, name in ((fsbm, "FSBM"), (base, "tau = 0")):
  ax.plot([r["step"] for r in res["history"]], [r["collision_rate"] for r in res["history"]],
          marker="o", label=name)
ax.set_xlabel("alternation")
ax.set_ylabel("collision rate")
ax.set_ylim(-0.05, 1.05)
ax.legend()
plt.show()
