r"""One SAE solver iteration at N = 4,361 (EGFR): ours and the official PyTorch closure.

  git clone https://github.com/Amshoreline/SAE /tmp/SAE   # the official code (PyTorch)
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/sae_split.py \
      --official_dir=/tmp/SAE [--iterations=20] [--repeats=5]

Same problem on both sides: EGFR's Morgan fingerprints (``core.datasets``; offline a
generated stand-in of the same size, said so), the balanced 3-bin target, a = 0.2, s = 100,
sigma = 0.1, lam 2.03e-3, ExtraAdam lr 1e-2 and the custom start. One *iteration* is the
whole extragradient step (two gradients of the Lagrangian, two Adam updates). Ours: the
compiled ``kernel.extragradient_step`` in float32, ``--iterations`` per call in one
``fori_loop``, with the top-k table (k = 128, the ``cpu`` preset) and the dense readout
(every column, the official arithmetic). Official: ``MaximumBalance`` of ``SAE_split.py``
with its vendored ``cooper`` (``LagrangianFormulation``, ``ConstrainedOptimizer`` with
``ExtraAdam`` and the cosine dual scheduler, as ``balance_split`` builds them), S in float64
as the official run promotes it, timed over the same number of iterations; its
binarisation every 500 iterations is left out on both sides. Runs alternate (ours,
official, ...) after a warm-up; each row: both medians (min-max) per iteration and the
per-pair ratio. Without ``--official_dir`` (or without torch: the ``[bench]`` extra) it
prints ours only and says so.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxlib_papers.core import datasets, timing  # noqa: E402
from jaxlib_papers.sae_split import data as data_lib  # noqa: E402
from jaxlib_papers.sae_split import kernel, splitter  # noqa: E402

EDGES, WEIGHTS, TEST_SIZE, LAM = (0.0, 1 / 3, 2 / 3, 1.0), (1 / 3,) * 3, 0.2, 2.03e-3


def load_fingerprints() -> tuple[np.ndarray, str]:
  try:
    path, origin = datasets.locate("sae_split/IC50_EGFR.csv")
    smiles, _ = data_lib.read_csv(path)
    return data_lib.fingerprints(smiles), f"{origin}: sae_split/IC50_EGFR.csv"
  except datasets.DataUnavailable as e:
    return (data_lib.generated(4361).fingerprints,
            f"generated stand-in, 4,361 x 2,048 (offline: {str(e)[:60]}...)")


def ours(fps: np.ndarray, neighbours: int, iterations: int):
  """(compiled program, its state, problem) of ``iterations`` extragradient steps."""
  n = len(fps)
  table = splitter._table_program(jnp.asarray(fps), neighbours or n, 512)  # pylint: disable=protected-access
  target = kernel.make_target(EDGES, WEIGHTS, 0.1)
  problem = splitter.make_problem(table, target, TEST_SIZE)
  settings = kernel.Settings(lam=LAM, lr=1e-2, dual_lr=1e-2, iterations=20_000)
  state = kernel.init_state(jax.random.key(233), problem, settings)

  @jax.jit
  def program(state, problem):
    return jax.lax.fori_loop(
        0, iterations, lambda _, s: kernel.extragradient_step(s, problem, settings), state)

  start = time.perf_counter()
  compiled = program.lower(state, problem).compile()
  return compiled, (state, problem), time.perf_counter() - start


def official(official_dir: pathlib.Path, fps: np.ndarray, iterations: int):
  """A callable running ``iterations`` official iterations (torch, float64 S)."""
  import torch  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, str(official_dir))
  import cooper  # pylint: disable=g-import-not-at-top
  import SAE_split  # noqa: N813  pylint: disable=g-import-not-at-top
  s = np.asarray(kernel.tanimoto(fps, fps), np.float64) * (1 - np.eye(len(fps)))
  target = kernel.make_target(EDGES, WEIGHTS, 0.1)
  problem = SAE_split.MaximumBalance(
      alpha=TEST_SIZE, C=torch.tensor(np.asarray(target.centres, np.float64)),
      sigmas=torch.tensor(np.asarray(target.widths, np.float64)), S=torch.tensor(s),
      E=torch.tensor(np.asarray(target.weights, np.float64)), lamb=LAM, scale_factor=100,
      sigmoid=True)
  formulation = cooper.LagrangianFormulation(problem)
  t = torch.nn.Parameter(torch.zeros(len(fps)))
  SAE_split.init_custom(t, 1 - TEST_SIZE, inv_sigmoid=True, init_scale=5)
  primal = cooper.optim.ExtraAdam([t], lr=1e-2, weight_decay=1e-5)
  dual = cooper.optim.partial_optimizer(cooper.optim.ExtraAdam, lr=1e-2, weight_decay=1e-5)
  scheduler = SAE_split.Scheduler(torch.optim.lr_scheduler.CosineAnnealingLR,
                                  {"T_max": 20_000})
  coop = cooper.ConstrainedOptimizer(formulation, primal, dual, scheduler)

  def run():
    for _ in range(iterations):
      coop.zero_grad()
      lagrangian = formulation.composite_objective(problem.closure, t)
      formulation.custom_backward(lagrangian)
      coop.step(problem.closure, t)
  return run, torch


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--official_dir", type=pathlib.Path, default=None)
  parser.add_argument("--iterations", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  fps, source = load_fingerprints()
  print(f"data: {source}; N = {len(fps)}")
  official_run, torch = None, None
  if args.official_dir is not None:
    try:
      official_run, torch = official(args.official_dir, fps, args.iterations)
      official_run()   # warm-up
    except ImportError as e:
      print(f"official side skipped: {e} (install the [bench] extra)")
      official_run = None
  else:
    print("official side: not run (no --official_dir); ours alone")
  print(timing.machine_line(torch))
  rows = []
  for name, k in (("top-k (k=128, cpu preset)", 128), ("dense (every column)", 0)):
    compiled, call_args, compile_s = ours(fps, k, args.iterations)
    jax.block_until_ready(compiled(*call_args))
    mine, theirs = [], []
    for _ in range(args.repeats):
      seconds, _ = timing.time_calls(compiled, *call_args)
      mine.append(1e3 * seconds[0] / args.iterations)
      if official_run is not None:
        start = time.perf_counter()
        official_run()
        theirs.append(1e3 * (time.perf_counter() - start) / args.iterations)
    rows.append(timing.side_by_side_row(name, "ms / iteration (2 gradients)", mine, theirs,
                                        compile_s))
  header = ("ours", "what", "ours ms", "compile s", "official ms", "official / ours")
  print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
  for row in rows:
    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
  main()
