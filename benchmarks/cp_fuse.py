r"""CP-Fuse speed: tokens/s of fused decoding (grid and exact rules) against one model.

  OPENBLAS_NUM_THREADS=1 python benchmarks/cp_fuse.py                   # cpu-preset sizes
  python benchmarks/cp_fuse.py --batch=256 --d_model=256 --layers=4      # GPU/TPU

Every rule runs in the same compiled ``lax.scan`` (the rule is data): the fused step costs
two model forwards plus the weight search (324 grid pairs x V, and ~40 bisection steps).
The single-model row runs one forward through the same loop (same full-buffer recompute);
the loop still evaluates both weight searches for its diagnostics, so the row isolates the
cost of the second forward, not of the search. Compile time is reported apart. The
official code (jaabmar/cp_fuse, PyTorch/HF)
needs torch and transformers, which are not installed here, and its ``_decode`` at HEAD does
not terminate (brief, section 4), so only ours is timed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.cp_fuse import data, fusion, kernel, models


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=33)
  parser.add_argument("--prompt_len", type=int, default=17)
  parser.add_argument("--num_new", type=int, default=48)
  parser.add_argument("--d_model", type=int, default=64)
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()

  model = models.CausalLM(data.VOCAB_SIZE, args.d_model, args.layers, 4, 4 * args.d_model,
                          max_len=args.prompt_len + args.num_new)
  def log_probs(params, tokens):
    return jax.vmap(lambda p, t: jax.nn.log_softmax(model.apply({"params": p}, t)))(
        params, tokens)
  keys = jax.random.split(jax.random.key(0), 2)
  dummy = jnp.zeros((1, args.prompt_len + args.num_new - 1), jnp.int32)
  pair = jax.vmap(lambda k: model.init(k, dummy)["params"])(keys)
  single = jax.tree.map(lambda x: x[:1], pair)
  prompts = jnp.asarray(np.random.default_rng(0).integers(
      5, data.VOCAB_SIZE, (args.batch, args.prompt_len)), jnp.int32)
  settings = kernel.DecodeSettings(num_new=args.num_new, grid=fusion.official_grid(10))

  def single_decode(params, x, key, opts):
    # One model through the same loop: its log-probs stand in for both slots, so only one
    # forward runs (log_probs of a [1, ...] stack broadcast to the pair).
    def one(p, tokens):
      shape = (2, *tokens.shape[1:], data.VOCAB_SIZE)
      return jnp.broadcast_to(log_probs(p, tokens[:1]), shape)
    return kernel.decode(one, params, x, key, opts, settings)

  fused = jax.jit(lambda p, x, k, o: kernel.decode(log_probs, p, x, k, o, settings))
  single_fn = jax.jit(single_decode)
  rows = []
  for name, fn, params, opts in (
      ("single model", single_fn, single, kernel.options(kernel.RULE_FIXED, (1.0, 0.0))),
      ("CP-Fuse grid", fused, pair, kernel.options(kernel.RULE_GRID)),
      ("CP-Fuse exact", fused, pair, kernel.options(kernel.RULE_EXACT))):
    start = time.perf_counter()
    jax.block_until_ready(fn(params, prompts, jax.random.key(1), opts))
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
      start = time.perf_counter()
      jax.block_until_ready(fn(params, prompts, jax.random.key(1), opts))
      times.append(time.perf_counter() - start)
    run = statistics.median(times)
    rows.append((name, first - run, run, args.batch * args.num_new / run))
  print(f"device: {jax.devices()[0].device_kind}; batch {args.batch}, prompt "
        f"{args.prompt_len}, {args.num_new} new tokens, d_model {args.d_model}, "
        f"{args.layers} layers")
  for name, compile_s, run, rate in rows:
    print(f"{name:14s} compile ~{compile_s:6.2f} s | run {1e3 * run:8.1f} ms | "
          f"{rate:9.0f} tokens/s (median of {args.repeats})")
  print("official PyTorch figure: none published; not run here (see the module doc).")


if __name__ == "__main__":
  main()
