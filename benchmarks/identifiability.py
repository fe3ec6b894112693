r"""Identifiability speed: one training call (seeds x variants in one program), medians.

  OPENBLAS_NUM_THREADS=1 python benchmarks/identifiability.py               # cpu preset
  python benchmarks/identifiability.py --hidden=50,250,250,250,250,50 --batch=1024 --runs=5

The official code (klindtlab/csi, PyTorch) trains one seed per process with fresh vMF
samples drawn by NumPy on the host every step; its simulation script does not run as
released (it imports ``src.spaces`` and then calls ``spaces.``) and PyTorch is not
installed here, so only ours is timed. Reported: compile time apart, then milliseconds per
optimiser step for all runs together and per run, and the vMF sampler alone.

The first line times the kernel as the package builds it here (its runs one after another
on CPU devices of one core each, else batched: ``Settings.runs_in_sequence``, printed).
``--members=map`` times the runs one after another (``runs_in_sequence=True``, a
``lax.map`` over the member axis) against them batched under ``vmap``, alternating, and
says whether the trained parameters agree (issue 40; seeds/identifiability.md, "Runs one
after another"). ``--members=head`` times, with the runs batched, the head's logits and
cross-entropy one member at a time (``Settings.head_per_member``,
``blocks.member_mapped_loss``) against the head batched over the members, alternating, and
checks that the parameters are bitwise equal.

  OPENBLAS_NUM_THREADS=1 python benchmarks/identifiability.py --objective=diet \
      --batch=1024 --runs=6 --members=head   # the check's diet_d5: 6 members
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.identifiability import data, kernel


def _compare(settings, kernels, repeats: int) -> None:
  """Two kernels of the same runs, alternating; medians, their ratio and the parameters."""
  steps, states, times = {}, {}, {name: [] for name in kernels}
  for name, kern in kernels.items():
    steps[name] = jax.jit(kern.train_step)
    states[name] = jax.block_until_ready(steps[name](jax.jit(kern.init)(
        jax.random.key(0)), None)[0])
  for _ in range(repeats):
    for name in kernels:
      start = time.perf_counter()
      states[name] = jax.block_until_ready(steps[name](states[name], None)[0])
      times[name].append((time.perf_counter() - start) / settings.steps_per_call)
  med = {name: statistics.median(t) for name, t in times.items()}
  leaves = {name: np.concatenate([np.ravel(x) for x in jax.tree.leaves(
      jax.device_get(st.params))]) for name, st in states.items()}
  (a, b) = kernels
  diff = float(np.max(np.abs(leaves[a] - leaves[b])))
  print("; ".join(f"{name}: {1e3 * med[name]:.2f} ms per step (min "
                  f"{1e3 * min(times[name]):.2f}, max {1e3 * max(times[name]):.2f})"
                  for name in kernels)
        + f"; {a} / {b} {med[a] / med[b]:.2f}x; parameters after {repeats + 1} calls: "
        f"max |{a} - {b}| {diff:.3g}"
        + (" (bitwise equal)" if np.array_equal(leaves[a], leaves[b]) else
           " (not bitwise: rounding differs, then training diverges)"))


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
  parser.add_argument("--runs", type=int, default=3, help="seeds in one program")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--members", choices=("vmap", "map", "head"), default="vmap",
                      help="map: also time the runs one after another against batched; "
                      "head: the runs batched, the head per member against batched; "
                      "alternating")
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
  form = ("one after another" if kernel.validate_settings(settings).runs_in_sequence
          else "batched under vmap")
  print(f"backend {jax.default_backend()}, {args.runs} runs x batch {args.batch}, "
        f"hidden {args.hidden}, {args.objective}; runs {form}")
  print(f"train call: compile+first {compile_s:.2f} s; {per_step_ms:.2f} ms per optimiser "
        f"step (all runs), {per_step_ms / args.runs:.2f} ms per run-step")

  mean = jnp.tile(data.normalize(jnp.ones(args.dim))[None], (args.batch * args.runs, 1))
  sampler = jax.jit(lambda k: data.sample_vmf(k, mean, 10.0)[0])
  compile_s, sample_s = _time(sampler, jax.random.key(1), repeats=args.repeats * 4)
  print(f"vMF sampler ({args.batch * args.runs} samples, d={args.dim}): compile "
        f"{compile_s:.2f} s; {1e3 * sample_s:.3f} ms per call")
  variants = kernel.make_variants(args.runs, (10.0,))
  if args.members == "map":
    _compare(settings, {
        "vmap": kernel.make_kernel(settings._replace(runs_in_sequence=False), variants),
        "map": kernel.make_kernel(settings._replace(runs_in_sequence=True), variants)},
        args.repeats)
  if args.members == "head":
    batched = settings._replace(runs_in_sequence=False)
    _compare(settings, {
        "batched_head": kernel.make_kernel(batched._replace(head_per_member=False), variants),
        "per_member_head": kernel.make_kernel(batched._replace(head_per_member=True),
                                              variants)},
        args.repeats)
  print("official code: not timed (does not run as released; PyTorch not installed)")


if __name__ == "__main__":
  main()
