"""Figures of the creativity experiment; ``reproduce.py`` and ``colab/creativity.py`` call
them."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from jaxlib_papers.core import figures


def coverage_figure(result) -> Figure:
  """cov_L against L (1..W) for every group (mean over seeds and texts), and each group's
  Creativity Index per text (claims' range)."""
  fig, (left, right) = figures.new_figure(1, 2, size=(5.0, 3.6))
  ngrams = np.arange(1, len(result.groups[0].coverage) + 1)
  for g in result.groups:
    left.plot(ngrams, g.coverage, marker="o", ms=3, label=g.label)
  spec = result.config["index"]
  left.axvspan(spec["min_ngram"] - 0.5, spec["max_ngram"] + 0.5, color="0.9", zorder=0)
  left.set(xlabel="L (words)", ylabel="L-coverage", ylim=(0, 1.02),
           title=f"coverage against a {result.corpus_tokens:,}-token corpus")
  left.legend(fontsize=7)
  scores = [np.ravel(g.scores) for g in result.groups]
  right.boxplot(scores, showfliers=False)
  right.set_xticks(range(1, len(scores) + 1), [g.label for g in result.groups],
                   rotation=30, ha="right", fontsize=7)
  right.set(ylabel=f"Creativity Index (L {spec['min_ngram']}..{spec['max_ngram']}, "
                   f"{spec['reduce']})", title="per text, all seeds")
  return fig


def spans_figure(example: dict, min_ngram: int, words_per_line: int = 14) -> Figure:
  """The example texts with the words inside an occurring span of >= ``min_ngram`` words
  highlighted (the union of DJ SEARCH's spans)."""
  names = list(example)
  lines = {n: -(-len(example[n]["words"]) // words_per_line) for n in names}
  fig, axes = figures.new_figure(len(names), 1, size=(9.0, 0.22 * max(lines.values()) + 0.6),
                                 squeeze=False)
  for ax, name in zip(axes[:, 0], names):
    words, covered = example[name]["words"], example[name]["covered"]
    ax.set_axis_off()
    ax.set_title(f"{name}: {np.mean(covered):.0%} of words in a matched span of >= "
                 f"{min_ngram} words", fontsize=8, loc="left")
    for i, (word, hit) in enumerate(zip(words, covered)):
      row, col = divmod(i, words_per_line)
      ax.text(col / words_per_line, 1 - (row + 0.5) / lines[name], word, fontsize=7,
              transform=ax.transAxes, va="center",
              bbox=dict(facecolor="gold", lw=0, pad=1) if hit else None)
  return fig
