r"""Wall time of DeepRUOT stages 1-2 on the gene data: 1 seed vs N seeds in one program.

  OPENBLAS_NUM_THREADS=1 python benchmarks/ruot.py --seeds=1,8 --repeats=3

Stages 1-2 are 50 + 30 passes over the 4 intervals (400 particles, Euler dt 0.01). We
compile once, time ``--passes_per_call`` passes per call ``--repeats`` times, and report
the median seconds per pass and the implied stage 1-2 time (80 passes). Ours only: a ratio
against the official PyTorch notebook is only meaningful timed side by side in the same run
(not yet written for DeepRUOT), never against a figure measured on another day.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import datasets
from jaxlib_papers.ruot import data as data_lib
from jaxlib_papers.ruot import kernel as K
from jaxlib_papers.ruot.models import make_networks

PASSES = 50 + 30


def time_seeds(snaps, num_seeds: int, passes_per_call: int, repeats: int, ot_method: str):
  nets = make_networks(snaps.dim, 128, 3)
  params = jax.vmap(nets.init)(jax.random.split(jax.random.key(0), num_seeds))
  kern = K.make_flow_stage(
      nets, list(snaps.times), [jnp.asarray(x) for x in snaps.xs], params,
      K.FlowStageSettings(
          trainable=("v", "g"), weights=K.FlowLossWeights(ot=0.1, mass=1.0),
          optimizer="adam", lr=1e-3, total_passes=10**6, passes_per_step=passes_per_call,
          dt=0.01, ot_kwargs=dict(method=ot_method)))
  state = jax.jit(kern.init)(jax.random.key(0))
  step = jax.jit(kern.train_step, donate_argnums=0)
  start = time.perf_counter()
  state, _ = step(state, None)
  jax.block_until_ready(state)
  compile_and_first = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = step(state, None)
    jax.block_until_ready(state)
    times.append((time.perf_counter() - start) / passes_per_call)
  return compile_and_first, float(np.median(times)), float(metrics["loss"])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data", default="",
                      help="gene CSV (default: the official file via core.datasets.fetch)")
  parser.add_argument("--seeds", default="1,8")
  parser.add_argument("--passes_per_call", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--ot", default="exact", choices=("exact", "sinkhorn"))
  args = parser.parse_args()
  try:
    path = args.data or datasets.fetch("ruot/simulation_gene_data.csv")
    snaps = data_lib.load_csv(path)
    source = str(path)
  except datasets.DataUnavailable as e:
    print(f"[data] {e}")
    snaps = data_lib.simulate_gene_network()
    source = "simulator (official CSV not available)"
  print(f"data: {source}; counts {snaps.counts.tolist()}; backend {jax.default_backend()}")
  base = None
  for num_seeds in (int(s) for s in args.seeds.split(",")):
    first, per_pass, loss = time_seeds(snaps, num_seeds, args.passes_per_call, args.repeats,
                                       args.ot)
    stage12 = per_pass * PASSES
    base = base or stage12
    print(f"seeds {num_seeds}: compile+first call {first:.1f} s | median {per_pass:.3f} s/pass"
          f" | stages 1-2 ({PASSES} passes) {stage12:.1f} s = {stage12 / num_seeds:.1f} s/seed"
          f" | vs 1 seed "
          f"{stage12 / base:.2f}x time for {num_seeds}x seeds | loss {loss:.3g}")


if __name__ == "__main__":
  main()
