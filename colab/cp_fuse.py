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
# # CP-Fuse: copyright-protected generation by adaptive model fusion
#
# Abad, Donhauser, Pinto, Yang, *Copyright-Protected Language Generation via Adaptive
# Model Fusion* (ICLR 2025). Two language models trained on disjoint sets of protected
# text are fused token by token, log p* = alpha log p1 + beta log p2, with (alpha, beta)
# re-chosen at every step to minimise max_i [KL(p* || p_i) - log p_i(prefix)]. The model
# under which the text so far is *less* likely gets the weight, so neither model's
# memorised passages come out.
#
# Here: two small transformers trained (in one vmapped program) on a synthetic two-corpus
# benchmark with memorised protected passages; a protected prompt decoded by each model,
# CP-Delta (static sqrt(p1 p2)) and CP-Fuse, with the overlap highlighted; the weights
# over time.

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
from jaxlib_papers.cp_fuse import plotting, reproduce, train
from jaxlib_papers.cp_fuse.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
config.loop.quiet = True
result = train.run(config, None)
pair = result.pairs[0]
bench = result.bench
print(f"preset {PRESET}: {2 * config.train.num_pairs} models trained for "
      f"{config.loop.num_steps} steps; final loss {result.history[-1]['loss']:.3f}")

# %% [markdown]
# ## A protected prompt of corpus 1, decoded greedily by every rule
# Highlighted: the longest run the generation shares with the protected passage.

# %%
html = plotting.highlighted_html(pair, bench, prompt_index=0)
try:  # a notebook renders the highlighted overlap; plain Python prints the HTML
  from IPython.display import HTML, display
  display(HTML(html))
except ImportError:
  print(html)

# %% [markdown]
# ## Reproduction and utility, all protected prompts

# %%
stats = reproduce.pair_statistics(pair, result.settings)
print(reproduce.table_markdown([stats]))

# %% [markdown]
# ## Weights and per-model objectives along the decode
# The grid rule (solid) and the exact solver (dashed, alpha + beta = 1).

# %%
fig = plotting.summary_figure(pair, bench, prompt_index=0)
figures.show(fig)  # the Figure the reproduction check saves
