"""The exact kernel against brute force: matching statistics, cov_L, DJ SEARCH's spans,
jitted and eager, with the brief's traps, and sharded over 8 fake devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.creativity import corpus, kernel, reference, train
from jaxlib_papers.creativity.configs import default

WIDTH = 12


@pytest.fixture(scope="module")
def cases():
  """Random corpora with the traps, run once through the jitted, vmapped program."""
  settings = train.settings_from_config(default.get_config("smoke"))
  rng = np.random.default_rng(3)
  made = [train._random_case(rng, 48, WIDTH) for _ in range(24)]  # pylint: disable=protected-access
  arrays = [np.stack([c[k] for c in made]) for k in (1, 2, 3)]
  out = jax.tree.map(np.asarray, train.exactness_program(WIDTH, 3)(*arrays))
  return settings, made, arrays, out


def test_matches_coverage_and_spans_equal_brute_force(cases):
  _, made, _, (m, cov, from_spans, spans) = cases
  checked_short = 0
  for c, (docs, _, queries, lengths) in enumerate(made):
    grams = reference.ngram_set(docs, WIDTH)
    for q, n in enumerate(lengths):
      text = queries[q, :n]
      np.testing.assert_array_equal(m[c, q, :n], reference.matches(grams, text, WIDTH))
      want = [reference.coverage(grams, text, L) for L in range(1, WIDTH + 1)]
      np.testing.assert_allclose(cov[c, q], want, atol=1e-6)
      np.testing.assert_allclose(from_spans[c, q, 2:], want[2:], atol=1e-6)   # L >= Lmin
      got = train._span_list(kernel.Spans(*spans), c, q)  # pylint: disable=protected-access
      assert got == reference.dj_search(grams, text, 3)
      checked_short += int(n < 3)
  assert checked_short > 0   # queries shorter than Lmin were among them


def test_eager_equals_jit(cases):
  _, _, (corpora, queries, lengths), (m, cov, _, spans) = cases
  with jax.disable_jit():
    table = kernel.build_index(corpora[0], WIDTH)
    eager_m = kernel.matching_statistics(table, queries[0])
    eager_spans = kernel.dj_spans(eager_m[1], lengths[0, 1], 3)
  np.testing.assert_array_equal(eager_m, m[0])
  assert int(eager_spans.count) == int(spans.count[0, 1])
  np.testing.assert_array_equal(eager_spans.start, spans.start[0, 1])


def test_no_match_crosses_a_document_boundary_and_corpus_ends_match():
  docs = [np.array([0, 1, 2]), np.array([3, 4])]
  index = corpus.build(docs, 4)
  texts = np.array([[1, 2, 3, 4], [3, 4, kernel.PAD, kernel.PAD], [0, 1, 2, kernel.PAD]],
                   np.int32)
  m = np.asarray(kernel.matching_statistics(index.table, texts))
  np.testing.assert_array_equal(m[0], [2, 1, 2, 1])    # "1 2 | 3 4": never 4 across
  np.testing.assert_array_equal(m[1, :2], [2, 1])      # the corpus's last document
  np.testing.assert_array_equal(m[2, :3], [3, 2, 1])   # its first


def test_closed_forms_self_and_unseen():
  rng = np.random.default_rng(0)
  text = rng.integers(0, 50, 30)
  index = corpus.build([text], WIDTH, vocab_size=100)
  spec = kernel.IndexSpec(5, 12, "sum")
  scores = corpus.score(index, [text, np.arange(50, 80)], spec)
  np.testing.assert_allclose(scores.coverage[0], 1.0)     # a text in the corpus: covered
  assert scores.index[0] == pytest.approx(0.0)
  np.testing.assert_allclose(scores.coverage[1], 0.0)     # ids the corpus lacks
  assert scores.index[1] == pytest.approx(8.0)
  mean = corpus.score(index, [np.arange(50, 80)], spec._replace(reduce="mean"))
  assert mean.index[0] == pytest.approx(1.0)


def test_table_is_sorted_like_numpy_lexsort():
  rng = np.random.default_rng(1)
  index = corpus.build([rng.integers(0, 3, 40), rng.integers(0, 3, 25)], 6)
  tokens, order = np.asarray(index.table.tokens), np.asarray(index.table.order)
  rows = tokens[order[:, None] + np.arange(6)]
  assert np.array_equal(rows, rows[np.lexsort(rows.T[::-1])])
  assert corpus._table_problem(tokens, order, 6, index.vocab_size) is None  # pylint: disable=protected-access
  plain = kernel.build_index(np.asarray(tokens[:-6]), 6)            # one key per column
  np.testing.assert_array_equal(plain.order, order)                 # packed keys: same
  packed32 = kernel.build_index(np.asarray(tokens[:-6]), 6, 3)      # int32 keys (no x64)
  np.testing.assert_array_equal(packed32.order, order)


def test_sharded_over_8_devices_equals_one_device():
  assert jax.device_count() == 8
  rng = np.random.default_rng(2)
  index = corpus.build([rng.integers(0, 5, 200) for _ in range(3)], WIDTH)
  texts = [rng.integers(0, 5, int(n)) for n in rng.integers(5, 30, 8)]
  spec = kernel.IndexSpec(3, 10)
  program = corpus.score_program(spec)
  sharded = corpus.score(index, texts, spec, program)          # B = 8: split over devices
  batch, lengths = corpus.pad_texts(texts, index, 3)
  single = jax.device_put((batch, lengths), jax.devices()[0])
  one = jax.tree.map(np.asarray, program(index.table, *single))
  np.testing.assert_array_equal(sharded.matches, one.matches)
  np.testing.assert_array_equal(sharded.coverage, one.coverage)


def test_vmapped_over_lengths_matches_loop():
  m = jnp.array([[3, 2, 1, 0, 2, 1]])
  both = np.asarray(kernel.coverage(m, jnp.array([6]), jnp.array([1, 2, 3])))[0]
  one = [float(kernel.coverage(m, jnp.array([6]), jnp.array([L]))[0, 0]) for L in (1, 2, 3)]
  np.testing.assert_allclose(both, one)
  np.testing.assert_allclose(both, [5 / 6, 5 / 6, 3 / 6])
