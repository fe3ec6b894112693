"""XLA:CPU compile time: jax.random vs core.prng draws, and LLVM -O2 vs -O1.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/compile_time.py [--repeats=5]

Part 1 (this process): for each shape, compiles a fresh ``jit`` of ``jax.random.normal``
and of ``core.prng.normal`` (same values, checked) ``--repeats`` times, alternating, with
the persistent compilation cache off, and prints the median compile seconds and the ratio.
Part 2 (two child processes per level, alternating): the wall time of the FSBM and
identifiability Colab demos at smoke size, cold, under XLA_FLAGS
``--xla_backend_optimization_level`` 2 (XLA's default) and 1 (what ``tests/conftest.py``
sets), with ``--demos``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 5, "Fresh compiles per shape and implementation.")
flags.DEFINE_bool("demos", False, "Also time two Colab demos at LLVM -O2 and -O1.")

SHAPES = [(4096,), (1000, 2), (1000, 10), (64, 4, 30, 2), (256, 4, 100, 2)]


def compile_seconds(fn, key) -> float:
  import jax  # pylint: disable=g-import-not-at-top
  lowered = jax.jit(fn).lower(key)   # a new function object: never a cache hit
  start = time.perf_counter()
  lowered.compile()
  return time.perf_counter() - start


def part1(repeats: int) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.core import prng  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_enable_compilation_cache", False)
  key = jax.random.key(0)
  compile_seconds(lambda k: k, key)  # backend start-up out of the first row
  print(f"jax {jax.__version__}, {jax.devices()[0].platform}, median of {repeats} fresh "
        "compiles each\n")
  print("| shape | jax.random.normal (s) | core.prng.normal (s) | ratio |")
  print("|---|---|---|---|")
  for shape in SHAPES:
    np.testing.assert_array_equal(np.asarray(prng.normal(key, shape)),
                                  np.asarray(jax.random.normal(key, shape)))
    theirs, ours = [], []
    for _ in range(repeats):
      theirs.append(compile_seconds(lambda k, s=shape: jax.random.normal(k, s), key))
      ours.append(compile_seconds(lambda k, s=shape: prng.normal(k, s), key))
    t, o = statistics.median(theirs), statistics.median(ours)
    print(f"| {shape} | {t:.2f} | {o:.2f} | {t / o:.1f}x |")


def part2(repeats: int) -> None:
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  print("\n| demo (smoke, cold) | LLVM -O2 (s) | LLVM -O1 (s) | ratio |")
  print("|---|---|---|---|")
  for demo in ("fsbm", "identifiability"):
    times = {2: [], 1: []}
    for _ in range(max(1, repeats // 2)):
      for level in (2, 1):
        env = dict(os.environ, JAXLIB_PAPERS_DEMO_PRESET="smoke", MPLBACKEND="Agg",
                   PYTHONPATH=root,
                   XLA_FLAGS=f"--xla_backend_optimization_level={level}")
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        start = time.perf_counter()
        subprocess.run([sys.executable, os.path.join(root, "colab", f"{demo}.py")],
                       env=env, check=True, capture_output=True)
        times[level].append(time.perf_counter() - start)
    o2, o1 = statistics.median(times[2]), statistics.median(times[1])
    print(f"| {demo} | {o2:.1f} | {o1:.1f} | {o2 / o1:.2f}x |")


def main(argv):
  del argv
  part1(FLAGS.repeats)
  if FLAGS.demos:
    part2(FLAGS.repeats)


if __name__ == "__main__":
  app.run(main)
