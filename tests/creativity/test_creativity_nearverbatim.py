"""The near-verbatim window rule against a brute-force loop over every window."""

import itertools

import jax
import numpy as np
import pytest

from jaxlib_papers.creativity import embeddings, kernel

SETTINGS = kernel.SoftSettings(tau=0.8, max_window=6)


def brute(span, content, ref, length, tau):
  sim = ref[:length] @ span.T
  idx = np.flatnonzero(content)
  if idx.size < 2:
    return False
  r2t = sim[:, idx].max(1)
  for a, b in itertools.combinations(range(length + 1), 2):
    if b - a < 2 or b - a > SETTINGS.max_window:
      continue
    if r2t[a:b].mean() >= tau and sim[a:b][:, idx].max(0).mean() >= tau:
      return True
  return False


def test_soft_match_equals_brute_force_jit_and_eager():
  rng = np.random.default_rng(0)
  words = [f"w{i}" for i in range(12)] + ["dream", "dreame", "king", "queen"]
  emb = embeddings.table(words, dim=32)
  program = jax.jit(jax.vmap(lambda s, c, r, v: kernel.soft_match(s, c, r, v, SETTINGS)))
  spans, contents, refs, valids, want = [], [], [], [], []
  for _ in range(40):
    ref_ids = rng.integers(0, len(words), 8)
    length = int(rng.integers(2, 9))
    span_ids = ref_ids[rng.integers(0, 4):][:5].copy()
    span_ids[rng.integers(0, len(span_ids))] = rng.integers(0, len(words))   # one edit
    span_ids = np.pad(span_ids, (0, 5 - span_ids.size), constant_values=0)
    content = rng.uniform(size=5) < 0.8
    spans.append(emb[span_ids]), contents.append(content), refs.append(emb[ref_ids])
    valids.append(np.arange(8) < length)
    want.append(brute(emb[span_ids], content, emb[ref_ids], length, SETTINGS.tau))
  got = np.asarray(program(*(np.stack(x) for x in (spans, contents, refs, valids))))
  np.testing.assert_array_equal(got, want)
  assert 0 < sum(want) < len(want)   # both outcomes exercised
  with jax.disable_jit():
    eager = kernel.soft_match(spans[0], contents[0], refs[0], valids[0], SETTINGS)
  assert bool(eager) == want[0]


def test_generated_embeddings_spelling_close_unrelated_far():
  v = {w: embeddings.trigram_vector(w) for w in ("dream", "dreame", "king", "queen")}
  assert float(v["dream"] @ v["dreame"]) > 0.6
  assert abs(float(v["king"] @ v["queen"])) < 0.2
  with pytest.raises(ValueError, match="words: expected a non-empty vocabulary"):
    embeddings.table([])


def brute_dj(text, content, length, refs, ref_lengths, min_ngram, tau, max_window):
  """The official near-verbatim DJ SEARCH loop, window rule by brute force."""
  def matches(f, s, ref, ref_length):
    idx = f + np.flatnonzero(content[f:s])
    sim = ref[:ref_length] @ text[idx].T
    r2t = sim.max(1)
    return any(2 <= b - a <= max_window and r2t[a:b].mean() >= tau
               and sim[a:b].max(0).mean() >= tau
               for a, b in itertools.combinations(range(ref_length + 1), 2))

  spans, f, s = [], 0, min_ngram
  while s <= length:
    if content[f:s].sum() < 2:
      found, record = True, False       # passed over, not recorded
    else:
      found = record = any(matches(f, s, r, n) for r, n in zip(refs, ref_lengths))
    if record:
      if spans and f <= spans[-1][0] and s >= spans[-1][1]:
        spans[-1] = (f, s)
      else:
        spans.append((f, s))
    if found:
      s += 1
    else:
      s += int(s - f <= min_ngram)
      f += 1
  return spans


def test_soft_dj_spans_equal_brute_force_loop():
  rng = np.random.default_rng(1)
  words = [f"w{i}" for i in range(6)] + ["dream", "dreame", "king", "kinge", "sleep",
                                         "sleepe"]
  emb = embeddings.table(words, dim=32)
  n, num_refs, rows, min_ngram = 12, 2, 10, 3
  settings = kernel.SoftSettings(tau=0.8, max_window=6)
  program = jax.jit(jax.vmap(lambda *a: kernel.soft_dj_spans(*a, min_ngram, settings)))
  cases, want = [], []
  for _ in range(40):
    ref_ids = rng.integers(0, len(words), (num_refs, rows))
    ref_lengths = rng.integers(2, rows + 1, num_refs)
    text_ids = np.concatenate([ref_ids[0], ref_ids[1]])[rng.integers(0, rows):][:n]
    text_ids = np.pad(text_ids, (0, n - text_ids.size), constant_values=1)
    edit = rng.uniform(size=n) < 0.25
    text_ids = np.where(edit, rng.integers(0, len(words), n), text_ids)
    content = rng.uniform(size=n) < 0.85
    length = int(rng.integers(min_ngram - 1, n + 1))
    cases.append((emb[text_ids], content, np.int32(length), emb[ref_ids],
                  ref_lengths.astype(np.int32)))
    want.append(brute_dj(emb[text_ids], content, length, emb[ref_ids], ref_lengths,
                         min_ngram, settings.tau, settings.max_window))
  got = program(*(np.stack(x) for x in zip(*cases)))
  for i, spans in enumerate(want):
    count = int(got.count[i])
    assert list(zip(got.start[i, :count].tolist(), got.end[i, :count].tolist())) == spans
  assert sum(map(len, want)) > 10 and sum(not w for w in want) > 0   # both outcomes
