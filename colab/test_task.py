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
# # Training on the test task confounds evaluation and emergence
#
# Dominguez-Olmedo, Dorner, Hardt (ICLR 2025). Newer language models (released from
# November 2023 on) score higher on MMLU and GSM8K than older ones of the same pretraining
# compute C. The paper fits
#
#     A = r + alpha * max(0, log10 C - c_e) + theta * N
#
# (r the chance level, N = 1 for a newer model, c_e the point where the benchmark
# "emerges"), finds a significant theta, and shows that fine-tuning every model on the same
# task data before evaluating removes it: newer models had, in effect, trained on the test
# task. The emergence point c_e also moves more than a decade of compute earlier.
#
# Everything below is fitted from the paper's own evaluation files (fetched from the
# official repository at a pinned commit, sha256-checked), in float64, with the emergence
# point found by an exact grid search (vmapped in JAX). Offline, the demo runs the generated
# toy only.

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

from jaxlib_papers.core import datasets, figures
from jaxlib_papers.test_task import data, evaluate, plotting, train
from jaxlib_papers.test_task.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
settings = train.settings_from_config(config)
try:
  table = data.fetch_table()  # 337 files, 14.8 MB, cached after the first time
  print(f"{len(table.models)} models, {int(table.new.sum())} newer; from {table.source}")
except datasets.DataUnavailable as error:
  table = None
  print(f"offline ({error}): the toy only")

# %% [markdown]
# ## Figure 1: before and after fine-tuning on the task data
# Left: base models; right: every model fine-tuned on the same task data (the score is
# max(base, fine-tuned), as the paper's code keeps it). Orange line = blue line + theta.

# %%
if table is not None:
  results = evaluate.analyse(table, settings.analysis)
  print(f"{'':6} {'theta pre':>17} {'theta post':>17} {'R2u pre/post':>13}  bootstrap CI pre")
  for bench, r in results.items():
    print(f"{bench:6} {r.pre.theta:+.3f} (p {r.pre.p:.0e}) {r.post.theta:+.3f} (p "
          f"{r.post.p:.2f}) {r.pre.r2_uncentered:.3f}/{r.post.r2_uncentered:.3f}  "
          f"[{r.pre.boot_low:.3f}, {r.pre.boot_high:.3f}]")
  figures.show(plotting.figure1(table, results))

# %% [markdown]
# ## Who gains from fine-tuning, and the appendix regressions
# Older models gain more: phi, the newer-model coefficient of (pre - post) in a regression
# with an intercept, is the part of theta that goes through training on the test task.

# %%
if table is not None:
  for bench, r in results.items():
    print(f"{bench}: psi {r.psi.coef:+.3f} (p {r.psi.p:.2f}), phi {r.phi.coef:+.3f} "
          f"(p {r.phi.p:.0e}); Pareto area {r.pareto_pre:.2f} -> {r.pareto_post:.2f}")
  figures.show(plotting.gain_figure(table))
  figures.show(plotting.pareto_figure(table, results))

# %% [markdown]
# ## Emergence moves earlier with task data
# Older models only (1e20 < C < 1e24), after k fine-tuning examples: the fitted emergence
# point c_e of A = r + alpha max(0, log10 C - log10 c_e).

# %%
if table is not None:
  for bench, r in results.items():
    print(bench, ", ".join(f"{k}: {10 ** v:.1e}" for k, v in r.emergence.items()))
  figures.show(plotting.emergence_figure(table, results))

# %% [markdown]
# ## The mechanism in a toy trained here
# Random-ReLU-feature models with ridge readouts; every third model saw 30% task labels in
# pretraining. theta is significant before the shared fine-tuning and not after.

# %%
from jaxlib_papers.core.precision import enable_x64  # noqa: E402
from jaxlib_papers.test_task import toy  # noqa: E402

with enable_x64(settings.toy.dtype == "float64"):
  fits, worlds = toy.run_toy(list(settings.toy_seeds[:1]), settings.toy)
print(f"toy: theta pre {fits[0].theta_pre:+.3f} (p {fits[0].p_pre:.0e}), post "
      f"{fits[0].theta_post:+.3f} (p {fits[0].p_post:.2f})")
figures.show(plotting.toy_figure(worlds[0], fits[0]))
