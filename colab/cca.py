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
# # CCA: guidance-free autoregressive generation by condition contrastive alignment
#
# Chen et al., *Toward Guidance-Free AR Visual Generation via Condition Contrastive
# Alignment* (ICLR 2025). Classifier-free guidance (CFG) samples an AR model from
# p(x|c) [p(x|c) / p(x)]^s by mixing conditional and unconditional logits at every token,
# which doubles the cost of sampling. CCA instead fine-tunes the model once, contrasting it
# with a frozen copy phi of itself: matched (image, label) pairs are positives, pairs with a
# rolled label are negatives,
#
# L = -E log sigma(beta g(x, c)) - lambda E log sigma(-beta g(x, c-)),
# g = log p_theta(x|c) - log p_phi(x|c),
#
# whose optimum is p_phi(x|c) [p(x|c) / p(x)]^{1/beta} / lambda^{1/beta}: the CFG target,
# reached by sampling *without* guidance. Here: an exact two-token toy, then a tiny
# class-conditional transformer on tokenised 8x8 digits.

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

from jaxlib_papers.cca import plotting, toy, train
from jaxlib_papers.cca.configs.default import get_config
from jaxlib_papers.core import figures
from jaxlib_papers.core.precision import enable_x64

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")

# %% [markdown]
# ## The exact toy: CCA's optimum against the CFG target
#
# x = (x1, x2) in {0,1}^2, two classes, p(x|c=0) = (.4, .3, .2, .1). The expected CCA loss
# is minimised exactly (float64, modified Newton). At lambda = Z^beta the optimum *is* the
# CFG target with s = 1/beta; other lambdas give other guidance strengths.

# %%
cond, prior = toy.TOY_CONDITIONALS, toy.TOY_PRIOR
lambdas = [0.0, 0.5, 1.0, 1.2, 2.0, 4.0, 8.0]
with enable_x64():
  optima = [toy.exact_optimum(1.0, lam) for lam in lambdas]
scales = [toy.best_fit_scale(p) for p in optima]
tv = toy.total_variation(optima[3], toy.cfg_target(cond, prior, 1.0))
print(f"lambda = Z = 1.2, beta = 1: TV to the s=1 CFG target = {tv:.1e}")
print("token-level CFG at s=1, TV to the sequence target:",
      round(toy.total_variation(toy.token_cfg(cond, prior, 1.0), toy.cfg_target(cond, prior, 1.0)), 4))
figures.show(plotting.toy_strength(lambdas, scales))

# %% [markdown]
# ## Digits: pretrain, align with CCA (lambda sweep), sample with and without CFG
#
# Every seed trains in one compiled program (vmapped), every (seed, lambda) alignment run
# in another. At the `smoke` preset this is a few seconds of training and the numbers mean
# little; `cpu` is the reproduction size (`python -m launch.reproduce --only=cca`).

# %%
config = get_config(PRESET)
config.loop.quiet = config.align_loop.quiet = True
result = train.run(config, None)
print(train.summary_table(result))

# %% [markdown]
# Sample grids (rows: digits 0-9) of the base model without guidance, with its best CFG
# scale, after CCA (no guidance) and CCA + CFG; right: accuracy against diversity for the
# CFG scale and the CCA lambda sweep.

# %%
fig = plotting.figure(result, dpi=70)
figures.show(fig)  # the Figure the reproduction check saves

# %% [markdown]
# ## The paper's regime: VQ tokens
#
# On these 64 raster tokens the base model's samples are already close to the real digits,
# so any guidance (CFG too) raises the Fréchet distance. The paper's models read VQ tokens;
# `configs/vq.py` tokenises each 2 x 2 patch as the nearest of 512 k-means centroids (16
# tokens per image): there the guidance-free samples are poor (accuracy ~40%), CFG lowers
# FD on every seed, and CCA (lambda = 1) lowers it on the mean of three seeds
# (`seeds/cca.md`, "VQ tokens"). Run it with
# `python -m launch.cca --config=jaxlib_papers/cca/configs/vq.py:cpu` (about 1.5 minutes on two
# cores), or here with `vq.get_config(PRESET)` from `jaxlib_papers.cca.configs`.
