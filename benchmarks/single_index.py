r"""Samples per second per core of online spherical SGD: the exact alignment chain against
the full d-dimensional step, in the same process, alternating.

  OPENBLAS_NUM_THREADS=1 taskset -c 0 PYTHONPATH=. python benchmarks/single_index.py \
      --dims=64,256,1024 --seeds=128 --samples=20000 --repeats=3

For each d: one cell's program (He3, the paper's LT + smoothing oracle at p = 3 so the
closed form's smoothing terms are all paid; every seed runs the whole budget: the stop
threshold is set above 1) timed with compilation apart (``core.timing``), as
samples / second over all seeds (seeds x samples / median seconds), i.e. per core when
pinned to one. The chain is O(1) per sample, the full step O(d), so their ratio grows with
d; both compute the same law of <w_t, theta*> (``tests/single_index``). No official code
exists (theory paper); nothing is compared with a stored figure.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

from jaxlib_papers.core import timing  # noqa: E402
from jaxlib_papers.single_index import kernel, links, losses  # noqa: E402


def program(engine: str, dim: int, samples: int, chunk: int):
  """The jitted run of R seeds for ``samples`` samples each (no early stop)."""
  link = links.LINKS["bin3"]
  step = kernel.StepSettings(link, link.transform, losses.Oracle(3, dim ** 0.25, dim),
                             0.1 * dim ** -0.25, noise_std=0.1)
  spec = kernel.RunSpec(engine, chunk, samples, (1.5,))   # never reached: full budget
  return jax.jit(lambda keys: kernel.run_online(step, spec, keys))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dims", default="64,256,1024")
  parser.add_argument("--seeds", type=int, default=128)
  parser.add_argument("--samples", type=int, default=20_000)
  parser.add_argument("--chunk", type=int, default=1000)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(argv)
  print(timing.machine_line())
  print(f"{'d':>6} {'engine':>6} {'compile s':>10} {'run s':>8} {'samples/s':>12} "
        f"{'chain/full':>10}")
  keys = jax.random.split(jax.random.key(0), args.seeds)
  for dim in (int(d) for d in args.dims.split(",")):
    rates = {}
    compiled = {e: timing.compile_and_time(program(e, dim, args.samples, args.chunk), keys,
                                           repeats=0) for e in ("chain", "full")}
    runs = {e: [] for e in compiled}
    for _ in range(max(1, args.repeats)):   # alternate the two programs
      for engine, timed in compiled.items():
        runs[engine] += timing.time_calls(timed.compiled, keys)[0]
    for engine, timed in compiled.items():
      seconds = sorted(runs[engine])[len(runs[engine]) // 2]
      rates[engine] = args.seeds * args.samples / seconds
      ratio = f"{rates['chain'] / rates['full']:.1f}x" if engine == "full" else ""
      print(f"{dim:6d} {engine:>6} {timed.compile_seconds:10.1f} {seconds:8.3f} "
            f"{rates[engine]:12.4g} {ratio:>10}", flush=True)


if __name__ == "__main__":
  main()
