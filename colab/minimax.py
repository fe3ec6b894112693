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
# # LEN: second-order min-max optimization with lazy Hessians
#
# Chen, Liu, Zhang, *Second-Order Min-Max Optimization with Lazy Hessians* (ICLR 2025).
# For min_x max_y f(x, y) with field F(z) = [grad_x f; -grad_y f] and Jacobian J, LEN is a
# cubic-regularised extragradient step that reuses one Jacobian for m steps:
#
# 1. z_{t+1/2} = z_t - (J(z_snapshot) + lam I)^{-1} F(z_t), with lam = M ||z_t - z_{t+1/2}||
# 2. z_{t+1} = z_t - F(z_{t+1/2}) / lam.
#
# The snapshot Jacobian is factored once per m steps (complex Schur, or a Hessenberg form),
# so the scalar root search for lam costs O(d^2) per try: with m ~ d, the total oracle cost
# #F + d #J drops well below that of EG-2 (m = 1). Every solver here is one compiled
# `lax.while_loop` in float64.
#
# The problem: the paper's cubic bilinear saddle (rho/6)||x||^3 + y^T (A x - b), whose exact
# saddle is known.

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

import matplotlib.pyplot as plt
import numpy as np

from jaxlib_papers.minimax import train
from jaxlib_papers.minimax.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
print(f"preset {PRESET}: n = {config.problem.n} (d = {2 * config.problem.n}), "
      f"M = {config.solve.reg_factor:.3g} rho m, tol {config.solve.tol:g}")

# %% [markdown]
# ## EG, EG-2 and LEN to ||F|| <= 1e-8
# `train.run` compiles each solver, then times the compiled run. LEN is one program with m
# and M as run-time arguments, compiled once here and reused for every m below.

# %%
problem, _ = train.build_problem(config)
program = train.compile_len_program(problem, config)
results = train.run(config, None, compiled_len=program)
dim = results["dim"]
print(f"\n{'method':>12} {'iters':>7} {'#J':>4} {'cost':>9} {'seconds':>8}")
for label, s in results["methods"].items():
  print(f"{label:>12} {s['iterations']:7d} {s['num_jacobian_calls']:4d} "
        f"{s['oracle_cost']:9.0f} {s['run_seconds']:8.3f}")


# %%
def cost_axis(label, length):
  t = np.arange(1, length + 1)
  if label.startswith("EG("):
    return 2 * t
  m = 1 if label == "EG-2" else int(label.split("=")[1].rstrip(")"))
  return 2 * t + dim * np.ceil(t / m)


fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for label, s in results["methods"].items():
  hist = np.asarray(s["grad_norm_history"])
  style = "--" if label.startswith("EG(") else "-"
  axes[0].semilogy(np.arange(1, len(hist) + 1), hist, style, label=label)
  axes[1].semilogy(cost_axis(label, len(hist)), hist, style, label=label)
axes[0].set_xscale("log")
axes[0].set_xlabel("iterations")
axes[1].set_xscale("log")
axes[1].set_xlabel("oracle cost #F + d #J")
for ax in axes:
  ax.set_ylabel("||F(z_{t+1/2})||")
  ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The effect of m
# One compiled LEN program takes m and M as run-time arguments, so the sweep compiles once.
# Larger m: more iterations but far fewer Jacobians (and factorizations).

# %%
ms = [m for m in (1, 2, 5, 10, 20, 50, 100) if m <= dim]
rows = []
for m in ms:
  _, s = train.solve_one(problem, "len", m, config, compiled_len=program)
  rows.append((m, s["iterations"], s["num_jacobian_calls"], s["oracle_cost"],
               s["run_seconds"], s["converged"]))
  print(f"m={m:4d}: {s['iterations']:5d} it, #J {s['num_jacobian_calls']:4d}, "
        f"cost {s['oracle_cost']:8.0f}, {s['run_seconds']:.3f} s, converged {s['converged']}")

rows = np.array(rows, dtype=float)
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
for ax, col, name in zip(axes, (1, 3, 4), ("iterations", "oracle cost", "seconds")):
  ax.plot(rows[:, 0], rows[:, col], "o-")
  ax.set_xscale("log")
  ax.set_xlabel("m (Jacobian refresh period)")
  ax.set_ylabel(name)
fig.suptitle(f"LEN on the cubic saddle, d = {dim}, M = (16/3) rho m")
fig.tight_layout()
plt.show()
