"""Figures shared by the reproduction check and the Colab demo."""

from __future__ import annotations

import numpy as np

from jaxlib_papers.core import figures


def overview_figure(parts: dict, learned_graph: np.ndarray, scores: np.ndarray | None = None,
                    series_index: int = 0, title: str = "", var_graph=None):
  """A test series with its anomaly, the true and learned graphs, the root-cause ranking.

  Args:
    parts: ``train.split`` output (test_normal, test_abnormal, test_labels, graph).
    learned_graph: [p, p] mean learned graph (max_k median_t |Psi|).
    scores: [T', p] z-scores of ``series_index`` (aligned with labels[K:]) or None.
    var_graph: optional [p, p] VAR |A| graph for a third panel.
  """
  panels = 4 if var_graph is None else 5
  fig, axes = figures.new_figure(1, panels, size=(3.2, 2.8))
  xa = parts["test_abnormal"][series_index]
  xn = parts["test_normal"][series_index]
  labels = parts["test_labels"][series_index]
  t_p = int(np.flatnonzero(labels.any(1))[0])
  roots = np.flatnonzero(labels[t_p])
  lo, hi = max(0, t_p - 30), min(xa.shape[0], t_p + 30)
  ax = axes[0]
  for j in range(xa.shape[1]):
    ax.plot(np.arange(lo, hi), xa[lo:hi, j], lw=1.5 if j in roots else 0.6)
  ax.plot(np.arange(lo, hi), xn[lo:hi, roots[0]], "k--", lw=0.8, label="normal twin")
  ax.axvline(t_p, color="r", lw=0.8)
  ax.set_title(f"abnormal series, t_p={t_p}, R={roots.tolist()}", fontsize=8)
  ax.legend(fontsize=6)
  graphs = [("true graph", parts["graph"]), ("AERCA graph", learned_graph)]
  if var_graph is not None:
    graphs.append(("VAR |A| graph", var_graph))
  for ax, (name, g) in zip(axes[1:], graphs):
    ax.imshow(np.asarray(g), cmap="viridis")
    ax.set_title(name + " (row target, col cause)", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
  ax = axes[-1]
  if scores is not None:
    lag = labels.shape[0] - scores.shape[0]
    z = scores[t_p - lag]
    order = np.argsort(-z)
    colors = ["tab:red" if j in roots else "tab:gray" for j in order]
    ax.bar(np.arange(len(z)), z[order], color=colors)
    ax.set_xticks(np.arange(len(z)))
    ax.set_xticklabels([str(j) for j in order], fontsize=6)
    ax.set_title("z-scores at t_p (red: root causes)", fontsize=8)
  fig.suptitle(title, fontsize=9)
  return fig


def result_overview(res, title: str = ""):
  """:func:`overview_figure` of a ``train.Result``: AERCA's mean graph (seed 0's when each
  seed has its own draw), its z-scores of the first abnormal test series (seed 0) and the
  VAR graph, on ``res.parts`` (seed 0's draw)."""
  m = res.methods
  return overview_figure(res.parts, np.asarray(m["aerca"]["graph_mean"]),
                         np.asarray(m["aerca"]["z_example"]), title=title,
                         var_graph=np.asarray(m["var"]["graph_mean"]))


def avg_at_k_figure(methods: dict, num_vars: int,
                    names: tuple[str, ...] = ("aerca", "var", "raw", "random")):
  """Avg@k against k for ``names`` of ``train.Result.methods``; a dashed line at k = p.

  (AC@k is 1 for every method once k >= p, so Avg@k past p flatters small sets.)
  """
  fig, ax = figures.new_figure(size=(4.5, 3))
  for name in names:
    avg = methods[name]["avg"]
    ax.plot(np.arange(1, len(avg) + 1), avg, marker="o", ms=3, label=name)
  ax.axvline(int(num_vars), color="gray", lw=0.6, ls="--")
  ax.set_xlabel("k")
  ax.set_ylabel("Avg@k")
  ax.legend(fontsize=7)
  return fig
