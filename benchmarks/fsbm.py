r"""FSBM speed: one CondSOC iteration and one M-step, medians over repeats.

  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/fsbm.py   # official sizes, S-tunnel
  PYTHONPATH=. python benchmarks/fsbm.py --pairs=1024 --iters=20 --repeats=5

Ours only: the CondSOC solve is one jitted program over all pairs (vmap over pairs,
lax.scan over iterations); the M-step is a lax.scan of AdamW + EMA steps. No ratio against
the official PyTorch code is printed: a ratio is only meaningful against the official code
timed side by side in the same run (not yet written for FSBM: it needs a CPU PyTorch and a
checkout of the official repository), never against a figure measured on another day.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.fsbm import feedback, gpath, kernel, tasks


def _time(fn, *args, repeats: int) -> tuple[float, float]:
  """(median wall seconds, median process CPU seconds) per call.

  CPU seconds are reported too because this machine is shared: under load the wall
  time overstates what the program needs.
  """
  jax.block_until_ready(fn(*args))  # compile + warm up
  walls, cpus = [], []
  for _ in range(repeats):
    start, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(*args))
    walls.append(time.perf_counter() - start)
    cpus.append(time.process_time() - cpu)
  return statistics.median(walls), statistics.median(cpus)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--pairs", type=int, default=1024, help="mB endpoint pairs")
  parser.add_argument("--iters", type=int, default=10, help="CondSOC iterations per call")
  parser.add_argument("--msteps", type=int, default=200, help="M-steps per call")
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()

  settings = kernel.CondSOCSettings(
      sigma=1.0, num_mean_knots=15, num_gamma_knots=30, num_steps=100, num_noise=4,
      lr_mean=0.2, lr_gamma=0.1, num_iters=args.iters, micro_batch=1024)
  kp = jnp.asarray(tasks.generate_keypoints("stunnel", 100, 100))
  inv_std = feedback.keypoint_inv_std(kp)
  rng = np.random.default_rng(0)
  p0, p1 = tasks.marginals("stunnel")
  x0, x1 = jnp.asarray(p0.sample(rng, args.pairs)), jnp.asarray(p1.sample(rng, args.pairs))
  mean_path = jax.vmap(lambda a, b: gpath.linear_mean_path(a, b, 15))(x0, x1)
  solve = jax.jit(lambda mp, key: kernel.condsoc_solve(
      mp[:, 0], mp[:, -1], mp, key, settings=settings, sign=1.0, tau=100.0, keypoints=kp,
      inv_std=inv_std))
  wall, cpu = _time(solve, mean_path, jax.random.key(0), repeats=args.repeats)
  condsoc_ms, condsoc_cpu_ms = wall / args.iters * 1e3, cpu / args.iters * 1e3

  fsbm_settings = kernel.FSBMSettings(dim=2, csoc=settings._replace(num_iters=1),
                                      match_steps=args.msteps, match_batch=64)
  kern = kernel.make_kernel(fsbm_settings, kp, tau=100.0)
  state = kern.init(jax.random.key(0))
  params = jax.vmap(lambda p: gpath.init_params(p, 30))(mean_path)

  # The M-step chunk alone (the alternation's inner scan), on fitted-path stand-ins.
  def msteps(state, key):
    net_params = jax.tree.map(lambda a: a[0], state.params)
    opt_state = jax.tree.map(lambda a: a[0], state.opt_state)
    import optax  # pylint: disable=g-import-not-at-top
    tx = optax.adamw(1e-3, weight_decay=0.0, eps=1e-8)

    def step(carry, k):
      p, s, e = carry
      k_idx, k_t, k_n = jax.random.split(k, 3)
      idx = jax.random.randint(k_idx, (64,), 0, args.pairs)
      t = jax.random.uniform(k_t, (64,), minval=1e-4, maxval=1 - 1e-4)
      noise = jax.random.normal(k_n, (64, 2))
      pp = jax.tree.map(lambda a: a[idx], params)
      xt, target = jax.vmap(lambda q, a, b, tt, n: kernel.path_drift_at(
          q, a, b, tt, n, sigma=1.0, sign=1.0))(pp, x0[idx], x1[idx], t, noise)
      loss, g = jax.value_and_grad(kernel.bridge_matching_loss)(p, kern.apply_fn, xt, t,
                                                                target)
      u, s = tx.update(g, s, p)
      p = optax.apply_updates(p, u)
      return (p, s, optax.incremental_update(p, e, 1e-3)), loss

    return jax.lax.scan(step, (net_params, opt_state, net_params),
                        jax.random.split(key, args.msteps))[1]

  wall, cpu = _time(jax.jit(msteps), state, jax.random.key(1), repeats=args.repeats)
  mstep_ms, mstep_cpu_ms = wall / args.msteps * 1e3, cpu / args.msteps * 1e3
  print(f"devices: {jax.devices()}")
  print(f"CondSOC iteration (mB={args.pairs}, S=100, N=4, T_mean=15, T_gamma=30): "
        f"{condsoc_ms:.1f} ms; CPU time {condsoc_cpu_ms:.1f} ms")
  print(f"M-step (batch 64): {mstep_ms:.2f} ms; CPU time {mstep_cpu_ms:.2f} ms")
  print("(ours only: no side-by-side official run in this benchmark yet)")


if __name__ == "__main__":
  main()
