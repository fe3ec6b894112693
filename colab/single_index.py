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
# # Single-index models at the SQ bound: label transform + smoothing
#
# Chen, Wu, Lu, Yang, Wang, *Can Neural Networks Achieve Optimal Computational-statistical
# Tradeoff? An Analysis on Single-Index Model* (ICLR 2025). Labels y = f(<theta*, x>) with
# x ~ N(0, I_d). Two exponents govern how many fresh samples online SGD needs to find
# theta*: the information exponent k* (the first nonzero Hermite coefficient of f) and the
# generative exponent s* <= k* (the same after the best label transform T(y)). Vanilla
# online SGD needs ~d^{k*-1} samples; the paper's algorithm (transform the label, use the
# Hermite activation of degree s*, smooth the loss over a sphere of radius d^{1/4}) needs
# ~d^{s*/2 v 1}, the statistical-query lower bound.
#
# Every step here is w <- normalise(w + eta T(y) dS/da (x - a w)), a = <w, x>, with S the
# smoothed Hermite loss in closed form (no Monte Carlo).

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
from jaxlib_papers.single_index import links, plotting, train
from jaxlib_papers.single_index.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
print(f"preset {PRESET}: {config.run.num_seeds} seeds per cell, cells "
      f"{list(config.dense.cells)}, engine {config.run.engine}")

# %% [markdown]
# ## Links and their exponents, as data
# A link is its function, its declared (k*, s*) and a label transform attaining s*;
# `check_link` measures the Hermite coefficients by Monte Carlo and refuses a link whose
# declaration disagrees.

# %%
for name, link in links.LINKS.items():
  m = links.check_link(link, noise_std=config.run.noise_std)
  print(f"{name:5s} k*={link.information_exponent} s*={link.generative_exponent}  "
        f"E[y h_j] = {np.round(m.label, 2)}  E[T h_j] = {np.round(m.transformed, 2)}")

# %% [markdown]
# ## Samples to weak recovery against d
# Each cell runs its seeds as one compiled loop (the exact alignment chain of the step, O(1)
# per sample); n* is the median over seeds of the samples to |<w, theta*>| >= 0.5. At the
# smoke preset the dimensions are tiny, so the slopes are rough.

# %%
result = train.run(config, None)
for cell in result.cells:
  print(f"{cell.cell:14s} n* {np.round(cell.median).astype(int)} at d = {cell.dims}: "
        f"slope {cell.slope:.2f} (theory {cell.theory_slope:g})")
figures.show(plotting.scaling_figure(result.cells))

# %% [markdown]
# ## Sparse theta* and the second layer
# For a k-sparse theta*, the degree-s* oracle at the coordinate vectors finds the support
# from ~k^{s*} log d samples. Stage 2 freezes the learned w and fits ridge on random ReLU
# features of <w, x>.

# %%
if result.sparse:
  figures.show(plotting.sparse_figure(result.sparse))
if result.stage2 is not None:
  figures.show(plotting.stage2_figure(result.stage2))
