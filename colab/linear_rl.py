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
# # Null-space randomized LSVI under linear Bellman completeness
#
# Wu, Sekhari, Krishnamurthy, Sun, *Computationally Efficient RL under Linear
# Bellman Completeness for Deterministic Dynamics* (ICLR 2025). The paper has no
# experiments; these are ours.
#
# With deterministic dynamics, least-squares value iteration fits the
# regression targets *exactly* on the span of the data (completeness), so the
# only place exploration noise is needed is the **null space** of the data.
# For each step h = H..1 the agent computes the min-norm least-squares fit
# theta_hat of V_bar_{h+1}(s') on phi, adds Gaussian noise xi that lives only
# off the span (covariance sigma^2 (I-P) Lambda^{-1} (I-P)), adds a sampled
# reward model omega_bar, and acts greedily on Q_bar = <omega_bar + theta_bar, phi>.
# At most d H episodes can leave the span (Lemma 3); on every other episode the
# predicted value equals the sampled return (Lemma 2).
#
# Each agent's whole run (T episodes) is one `lax.scan`, vmapped over seeds, in float64.

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
from jaxlib_papers.linear_rl import envs, kernel, plotting, train
from jaxlib_papers.linear_rl.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
print(f"preset {PRESET}: DeepSea N = {config.deep_sea.env.size}, "
      f"T = {config.run.num_episodes}, {config.run.num_seeds} seeds, agents "
      f"{list(config.deep_sea.agents)}")

# %% [markdown]
# ## DeepSea: regret per agent
# Moving left pays 0.01/N, moving right pays nothing until the bottom-right
# corner pays 1; which action index means "right" is random per cell and seed.
# `train.run` compiles one program per agent and runs all seeds at once; its
# `summary` holds the mean and std over seeds.

# %%
result = train.run(config, None)
agents = result.agents
figures.show(plotting.regret_figure(
    {label: np.asarray(a.regret) for label, a in agents.items()},
    f"DeepSea N = {config.deep_sea.env.size} (band: min-max over seeds)"))
for row in result.summary:
  label = row["agent"]
  print(f"{label:>18}: cumulative regret {row['cumulative_regret']:7.1f} "
        f"(std {row['cumulative_regret_std']:.1f}), last-100 mean "
        f"{row['mean_regret_last100']:.3f}, first goal episode "
        f"{agents[label].first_goal_episode}")

# %% [markdown]
# ## Out-of-span episodes against d H (Lemma 3), and Lemma 2
# An episode is out of span when some feature on its path is not in the span
# of the earlier data at that step. Each such episode adds at least one
# dimension, so there are at most d H of them.

# %%
ours = agents["nullspace"]
figures.show(plotting.out_of_span_figure(ours))
print(f"out-of-span episodes per seed {ours.out_of_span_episodes} <= dH = {ours.dH}")
print(f"Lemma 2: max |V_bar_1(s_1) - sum_h <omega_bar_h, phi_h>| on in-span episodes "
      f"= {ours.lemma2_max_gap_in_span:.2e}")

# %% [markdown]
# ## One DeepSea trajectory
# The greedy path of the last plan of seed 0 (rows are steps, columns are
# positions); the goal is the bottom-right cell.

# %%
env = envs.deep_sea(**dict(config.deep_sea.env))
params = kernel.env_params_for_seed(env, int(config.seed))
figures.show(plotting.deep_sea_path_figure(np.asarray(ours.final_q_weights[0]), params))
