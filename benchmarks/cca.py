r"""CCA speed: one alignment step (theta and the frozen phi on matched + mismatched labels)
and one sampling run (guidance-free and CFG, KV cache and full-prefix recompute).

  OPENBLAS_NUM_THREADS=1 python benchmarks/cca.py
  python benchmarks/cca.py --width=256 --depth=8 --batch=256 --samples=1024   # on a GPU

The official code (thu-ml/CCA) fine-tunes LlamaGen / VAR in PyTorch on ImageNet: it cannot
run here (no torch, no checkpoints) and publishes no step time, so only ours is printed.
Compile time is reported apart from the median run time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.cca import data, kernel, models


def _time(fn, *args, repeats: int) -> tuple[float, float]:
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))                 # compile + first run
  first = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return first - statistics.median(times), statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--width", type=int, default=48)
  parser.add_argument("--depth", type=int, default=2)
  parser.add_argument("--levels", type=int, default=5)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--runs", type=int, default=3, help="vmapped runs (seeds x lambdas)")
  parser.add_argument("--samples", type=int, default=500)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()

  model = models.ARTransformer(args.levels, data.NUM_CLASSES, data.LENGTH, width=args.width,
                               depth=args.depth, heads=4, mlp=128 * args.width // 48)
  params = model.init(jax.random.key(0), jnp.zeros((1,), jnp.int32),
                      jnp.zeros((1, data.LENGTH), jnp.int32))
  refs = jax.tree.map(lambda x: jnp.repeat(x[None], args.runs, 0), params)
  tk = kernel.make_align_kernel(kernel.sequence_logprob(model), optax.adamw(1e-4),
                                kernel.AlignSettings(beta=0.1), refs,
                                np.full(args.runs, 30.0))
  state = jax.jit(tk.init)(jax.random.key(1))
  rng = np.random.default_rng(0)
  batch = {"tokens": jnp.asarray(rng.integers(0, args.levels, (args.batch, args.runs,
                                                                data.LENGTH)), jnp.int32),
           "labels": jnp.asarray(rng.integers(0, 10, (args.batch, args.runs)), jnp.int32)}
  step = jax.jit(tk.train_step)
  compile_s, run_s = _time(lambda s, b: step(s, b)[1], state, batch, repeats=args.repeats)
  print(f"CCA step ({args.runs} runs x batch {args.batch}, width {args.width}): "
        f"{1e3 * run_s:.1f} ms (compile {compile_s:.1f} s)")
  labels = jnp.asarray(np.arange(args.samples) % 10, jnp.int32)
  for guided in (False, True):
    for use_cache in (True, False):
      sample = jax.jit(kernel.make_sampler(model, guided=guided, use_cache=use_cache))
      compile_s, run_s = _time(sample, params, labels, jax.random.key(2), 1.0,
                               repeats=args.repeats)
      print(f"sample {args.samples} x {data.LENGTH} tokens, {'CFG' if guided else 'no guidance'}"
            f", {'KV cache' if use_cache else 'recompute'}: {1e3 * run_s:.1f} ms "
            f"(compile {compile_s:.1f} s)")


if __name__ == "__main__":
  main()
