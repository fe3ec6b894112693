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

from jaxlib_papers.core import figures
from jaxlib_papers.minimax import plotting, train
from jaxlib_papers.minimax.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
settings = train.settings_from_config(config)
print(f"preset {PRESET}: n = {config.problem.n} (d = {2 * config.problem.n}), "
      f"M = {settings.reg_factor:.3g} rho m, tol {settings.tol:g}")

# %% [markdown]
# ## EG, EG-2 and LEN to ||F|| <= 1e-8
# `train.run` compiles each solver, then times the compiled run. LEN is one program with m
# and M as run-time arguments, compiled once here and reused for every m below.

# %%
problem, _ = train.build_problem(config)
program = train.compile_len_program(problem, settings)
result = train.run(config, None, compiled_len=program)
dim = result.dim
print(f"\n{'method':>12} {'iters':>7} {'#J':>4} {'cost':>9} {'seconds':>8}")
for label, s in result.methods.items():
  print(f"{label:>12} {s.iterations:7d} {s.num_jacobian_calls:4d} "
        f"{s.oracle_cost:9.0f} {s.run_seconds:8.3f}")

# %%
figures.show(plotting.history_figure(result))

# %% [markdown]
# ## The effect of m
# One compiled LEN program takes m and M as run-time arguments, so the sweep compiles once.
# Larger m: more iterations but far fewer Jacobians (and factorizations).

# %%
ms = [m for m in (1, 2, 5, 10, 20, 50, 100) if m <= dim]
sweep = []
for m in ms:
  _, s = train.solve_one(problem, "len", m, settings, compiled_len=program)
  sweep.append(s)
  print(f"m={m:4d}: {s.iterations:5d} it, #J {s.num_jacobian_calls:4d}, "
        f"cost {s.oracle_cost:8.0f}, {s.run_seconds:.3f} s, converged {s.converged}")

figures.show(plotting.m_sweep_figure(
    ms, sweep, f"LEN on the cubic saddle, d = {dim}, M = (16/3) rho m"))
