r"""Identifiability speed: one vmapped training call (seeds x variants), medians of repeats.

  OPENBLAS_NUM_THREADS=1 python benchmarks/identifiability.py               # cpu preset
  python benchmarks/identifiability.py --hidden=50,250,250,250,250,50 --batch=1024 --runs=5

The official code (klindtlab/csi, PyTorch) trains one seed per process with fresh vMF
samples drawn by NumPy on the host every step; its simulation script does not run as
released (it imports ``src.spaces`` and then calls ``spaces.``) and PyTorch is not
installed here, so only ours is timed. Reported: compile time apart, then milliseconds per
optimiser step for all runs together and per run, and the vMF sampler alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from jaxlib_papers.identifiability import data, kernel


def _time(fn, *args, repeats: int) -> tuple[float, float]:
  start = time.perf_counter()
  out = fn(*args)
  jax.block_until_ready(out)
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return compile_s, statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dim", type=int, default=5)
  parser.add_argument("--objective", choices=kernel.OBJECTIVES, default="supervised")
  parser.add_argument("--hidden", default="32,128,128,32")
  parser.add_argument("--batch", type=int, default=256)
  parser.add_argument("--steps_per_call", type=int, default=50)
  parser.add_argument("--runs", type=int, default=3, help="seeds vmapped in one program")
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()

  settings = kernel.Settings(
      dim=args.dim, num_classes=100, num_indices=1000, objective=args.objective,
      hidden=tuple(int(h) for h in args.hidden.split(",")), batch_size=args.batch,
      steps_per_call=args.steps_per_call, mixing_candidates=256)
  kern = kernel.make_kernel(settings, kernel.make_variants(args.runs, (10.0,)))
  state = jax.jit(kern.init)(jax.random.key(0))
  step = jax.jit(kern.train_step)
  compile_s, call_s = _time(lambda s: step(s, None)[1], state, repeats=args.repeats)
  per_step_ms = 1e3 * call_s / args.steps_per_call
  print(f"backend {jax.default_backend()}, {args.runs} runs x batch {args.batch}, "
        f"hidden {args.hidden}, {args.objective}")
  print(f"train call: compile+first {compile_s:.2f} s; {per_step_ms:.2f} ms per optimiser "
        f"step (all runs), {per_step_ms / args.runs:.2f} ms per run-step")

  mean = jnp.tile(data.normalize(jnp.ones(args.dim))[None], (args.batch * args.runs, 1))
  sampler = jax.jit(lambda k: data.sample_vmf(k, mean, 10.0)[0])
  compile_s, sample_s = _time(sampler, jax.random.key(1), repeats=args.repeats * 4)
  print(f"vMF sampler ({args.batch * args.runs} samples, d={args.dim}): compile "
        f"{compile_s:.2f} s; {1e3 * sample_s:.3f} ms per call")
  print("official code: not timed (does not run as released; PyTorch not installed)")


if __name__ == "__main__":
  main()
