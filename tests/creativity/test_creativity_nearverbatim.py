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
