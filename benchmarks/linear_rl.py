r"""Episodes per second of null-space randomized LSVI on DeepSea, single seed vs vmapped.

  OPENBLAS_NUM_THREADS=1 python benchmarks/linear_rl.py --size=20 --episodes=1000 \
      --seeds=1,10,100 --agents=nullspace,lsvi_ucb --repeats=3

For each agent and seed count: median seconds of the compiled run (compilation
excluded and reported separately), episodes per second per seed (``T * seeds /
seconds``) and the speed-up of the vmapped program over the single seed. There
is no official code and no official timing; the issue's target is DeepSea
N = 20, T = 1000, 10 seeds in under 30 s on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxlib_papers.core import timing  # noqa: E402
from jaxlib_papers.core.precision import enable_x64  # noqa: E402
from jaxlib_papers.linear_rl import envs, kernel  # noqa: E402

TARGET_SECONDS = 30.0  # issue: N = 20, T = 1000, 10 seeds on 2 CPU cores


def bench(env, cfg, episodes, num_seeds, repeats):
  with enable_x64():
    keys = jax.vmap(jax.random.key)(jnp.arange(num_seeds))
    timed = timing.compile_and_time(
        jax.vmap(lambda k: kernel.run_episodes(env, cfg, episodes, k)), keys, repeats=repeats)
  return timed.compile_seconds, timed.median


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--size", type=int, default=20)
  parser.add_argument("--episodes", type=int, default=1000)
  parser.add_argument("--seeds", default="1,10,100")
  parser.add_argument("--agents", default="nullspace")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  env = envs.deep_sea(args.size)
  seed_counts = [int(s) for s in args.seeds.split(",")]
  print(f"DeepSea N={args.size}, T={args.episodes}, backend "
        f"{jax.default_backend()}, devices {jax.device_count()}")
  print(f"{'agent':>10} {'seeds':>6} {'compile s':>10} {'run s':>8} "
        f"{'ep/s/seed':>10} {'ep/s all':>10} {'vs 1 seed':>10}")
  for name in args.agents.split(","):
    cfg = kernel.AgentConfig(name=name)
    single = None
    for num_seeds in seed_counts:
      compile_s, run_s = bench(env, cfg, args.episodes, num_seeds,
                               args.repeats)
      per_seed = args.episodes / run_s  # each seed's episodes per second
      total = per_seed * num_seeds       # all seeds together
      if num_seeds == 1:
        single = total
      ratio = f"{total / single:9.1f}x" if single else "-"
      print(f"{name:>10} {num_seeds:6d} {compile_s:10.1f} {run_s:8.2f} "
            f"{per_seed:10.1f} {total:10.1f} {ratio:>10}", flush=True)
      if num_seeds == 10 and args.size == 20 and args.episodes == 1000:
        print(f"{'':>10} target: 10 seeds in < {TARGET_SECONDS:.0f} s: "
              f"{'met' if run_s < TARGET_SECONDS else 'missed'} "
              f"({run_s:.1f} s run + {compile_s:.1f} s compile)")


if __name__ == "__main__":
  main()
