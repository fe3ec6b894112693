r"""Seconds per training epoch of AERCA: seeds vmapped in one compiled scan vs one seed.

  OPENBLAS_NUM_THREADS=1 python benchmarks/aerca.py --dataset=nonlinear --preset=cpu \
      --seeds=1,3,8 --repeats=3 [--official_dir=/path/to/AERCA]

For each seed count: compile seconds of one ``train_step`` (``epochs_per_step`` epochs,
reported apart), the median seconds per epoch over ``--repeats`` calls after warm-up, and
epochs per second summed over seeds. The official PyTorch code trains one seed with one
Python-level optimizer step per series; with ``--official_dir`` (a user checkout with
torch installed) its ``AERCA._training_step`` is timed on the same series for one epoch
of 8 steps. Without it only ours is printed (torch is not a dependency of this suite).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

from jaxlib_papers.aerca import kernel as K  # noqa: E402
from jaxlib_papers.aerca import train  # noqa: E402
from jaxlib_papers.aerca.configs.default import dataset_config  # noqa: E402
from jaxlib_papers.aerca.models import Networks  # noqa: E402


def bench_ours(config, parts, num_seeds, repeats):
  nets = Networks(int(config.data.num_vars), int(config.model.lag),
                  int(config.model.hidden), int(config.model.layers))
  per_step = int(config.optim.epochs_per_step)
  settings = train.settings_from_config(config)
  kern = K.make_train_kernel(nets, settings.loss, parts["fit"], parts["val"],
                             settings.train._replace(num_seeds=num_seeds, patience=10 ** 6))
  state = jax.jit(kern.init)(jax.random.key(0))
  start = time.perf_counter()
  step = jax.jit(kern.train_step).lower(state, None).compile()
  compile_s = time.perf_counter() - start
  state, _ = jax.block_until_ready(step(state, None))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(step(state, None))
    times.append(time.perf_counter() - start)
  return compile_s, statistics.median(times) / per_step


def bench_official(official_dir, config, parts, repeats):
  sys.path.insert(0, official_dir)
  import torch  # pylint: disable=g-import-not-at-top
  from models import aerca as official  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  model = official.AERCA(num_vars=int(config.data.num_vars),
                         hidden_layer_size=int(config.model.hidden),
                         num_hidden_layers=int(config.model.layers), device="cpu",
                         window_size=int(config.model.lag), lr=float(config.optim.lr))
  times = []
  for _ in range(repeats + 1):
    start = time.perf_counter()
    for x in parts["fit"]:
      model.optimizer.zero_grad()
      loss = model._training_step(x)  # pylint: disable=protected-access
      loss.backward()
      model.optimizer.step()
    times.append(time.perf_counter() - start)
  return statistics.median(times[1:])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dataset", default="nonlinear")
  parser.add_argument("--preset", default="cpu")
  parser.add_argument("--seeds", default="1,3,8")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--official_dir", default=None)
  args = parser.parse_args()
  config = dataset_config(args.dataset, args.preset)
  parts = train.split(train.make_dataset(config), config)
  print(f"{args.dataset} {args.preset}: p={config.data.num_vars} T={config.data.length} "
        f"K={config.model.lag} H={config.model.hidden} L={config.model.layers}, "
        f"{len(parts['fit'])} training series per epoch, backend {jax.default_backend()}")
  print(f"{'seeds':>6} {'compile s':>10} {'s/epoch':>9} {'seed-epochs/s':>14}")
  for num_seeds in [int(s) for s in args.seeds.split(",")]:
    compile_s, per_epoch = bench_ours(config, parts, num_seeds, args.repeats)
    print(f"{num_seeds:6d} {compile_s:10.1f} {per_epoch:9.3f} {num_seeds / per_epoch:14.2f}",
          flush=True)
  if args.official_dir:
    per_epoch = bench_official(args.official_dir, config, parts, args.repeats)
    print(f"official (PyTorch, 1 seed): {per_epoch:.3f} s/epoch")
  else:
    print("official code not timed (pass --official_dir=<checkout> with torch installed)")


if __name__ == "__main__":
  main()
