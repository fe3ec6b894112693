"""Figures shared by the reproduction check and the Colab demo."""

from __future__ import annotations

import html

import numpy as np

from jaxlib_papers.core import figures
from jaxlib_papers.cp_fuse import data as data_lib
from jaxlib_papers.cp_fuse import metrics, train

SHOWN = ("model_1", "model_2", "cp_delta", "cp_fuse", "cp_fuse_exact")


def summary_figure(pair: train.PairResult, bench: data_lib.Benchmark, path=None,
                   prompt_index: int = 0):
  """Three panels: p95 LCS per method, the CP-Fuse weights along one protected decode,
  and the per-model objectives F_i along it. Returns the figure (saved when ``path``)."""
  owner = pair.owner
  private = owner < 2
  rep = pair.reproduction
  fig, axes = figures.new_figure(1, 3, size=(11 / 3, 3.0))
  names = list(rep)
  p95 = [np.percentile(rep[n]["lcs_sets"].max(1)[private], 95) for n in names]
  axes[0].barh(names, p95, color=["C0" if "cp_fuse" not in n else "C3" for n in names])
  axes[0].set_xlabel("p95 LCS with protected text (tokens)")
  axes[0].invert_yaxis()
  for name, style in (("cp_fuse", "-"), ("cp_fuse_exact", "--")):
    d = pair.decode[name]
    axes[1].plot(d["alpha"][prompt_index], "C0" + style, label=f"{name} alpha")
    axes[1].plot(d["beta"][prompt_index], "C1" + style, label=f"{name} beta")
  axes[1].set_yscale("symlog", linthresh=1.0)
  axes[1].set_xlabel("decoding step")
  axes[1].set_title(f"weights, prompt {prompt_index} (corpus {owner[prompt_index]})",
                    fontsize=9)
  axes[1].legend(fontsize=6)
  d = pair.decode["cp_fuse"]
  axes[2].plot(d["per_model"][prompt_index, :, 0], label="F_1 = KL(q||p1) - log p1(y<t)")
  axes[2].plot(d["per_model"][prompt_index, :, 1], label="F_2")
  axes[2].set_xlabel("decoding step")
  axes[2].legend(fontsize=6)
  axes[2].set_title("CP-Fuse (grid): per-model objectives", fontsize=9)
  if path is not None:
    figures.save(fig, path, dpi=80)
  return fig


def highlighted_html(pair: train.PairResult, bench: data_lib.Benchmark, prompt_index: int = 0,
                     methods=SHOWN) -> str:
  """HTML: the prompt, then each method's continuation with its longest common substring
  with the prompt's protected passage highlighted."""
  passage = np.concatenate([pair.prompts[prompt_index, 1:],
                            pair.continuations[prompt_index]])
  prompt_text = data_lib.detokenize(pair.prompts[prompt_index, 1:])
  rows = [f"<p><b>prompt</b>: {html.escape(prompt_text)}</p>",
          f"<p><b>protected continuation</b>: "
          f"{html.escape(data_lib.detokenize(pair.continuations[prompt_index]))}</p>"]
  for name in methods:
    tokens = pair.decode[name]["tokens"][prompt_index]
    start, length = metrics.longest_match_span(tokens, passage)
    words = [html.escape(data_lib.detokenize([t])) for t in tokens]
    marked = [f"<mark>{w}</mark>" if start <= i < start + length else w
              for i, w in enumerate(words)]
    rows.append(f"<p><b>{name}</b> (LCS {length} tokens): {' '.join(marked)}</p>")
  return "\n".join(rows)
