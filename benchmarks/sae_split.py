r"""One SAE solver iteration at N = 4,361 (EGFR): ours and the official PyTorch closure.

  git clone https://github.com/Amshoreline/SAE /tmp/SAE   # the official code (PyTorch)
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 PYTHONPATH=. \
      python benchmarks/sae_split.py --official_dir=/tmp/SAE [--iterations=20] \
      [--official_iterations=2] [--repeats=7] [--threads=<cores>]

Same problem on both sides: EGFR's Morgan fingerprints (``core.datasets``; offline the
official clone's ``demo_input/IC50_EGFR.csv``, sha256-checked, else a generated stand-in of
the same size, said so), the balanced 3-bin target, a = 0.2, s = 100,
sigma = 0.1, lam 2.03e-3, ExtraAdam lr 1e-2 and the custom start. One *iteration* is the
whole extragradient step (two gradients of the Lagrangian, two Adam updates). Ours: the
compiled ``kernel.extragradient_step`` in float32, ``--iterations`` per call in one
``fori_loop``, with the top-k table (k = 128, the ``cpu`` preset) and the dense readout
(every column, the official arithmetic). Official: ``MaximumBalance`` of ``SAE_split.py``
with its vendored ``cooper`` (``LagrangianFormulation``, ``ConstrainedOptimizer`` with
``ExtraAdam`` and the cosine dual scheduler, as ``balance_split`` builds them), C, sigmas
and E float32 and S float64 as there, the custom start's shuffle seeded 233, timed over
``--official_iterations`` (default ``--iterations``) per call and reported per iteration;
torch gets ``--threads`` (default: the core count, which XLA:CPU uses), both printed; the official
binarisation every 500 iterations is left out on both sides. Runs alternate (ours,
official, ...) after a warm-up; each row: both medians (min-max) per iteration and the
per-pair ratio, and ours against this machine's own peaks measured in the same run after
the timed rows ("ours of peak": the roofline's bound and the fraction of its peak reached,
from XLA's counts per iteration; ``core.timing``). Without ``--official_dir`` (or without
torch: the ``[bench]`` extra) it prints ours only and says so.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import statistics
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


def load_fingerprints(official_dir: pathlib.Path | None = None) -> tuple[np.ndarray, str]:
  name = "sae_split/IC50_EGFR.csv"
  try:
    path, origin = datasets.locate(name)
    smiles, _ = data_lib.read_csv(path)
    return data_lib.fingerprints(smiles), f"{origin}: {name}"
  except datasets.DataUnavailable as e:
    # Offline, the official clone ships the same file (checked against the registry).
    path = official_dir / "demo_input" / "IC50_EGFR.csv" if official_dir else None
    if path is not None and path.is_file():
      datasets.verify(name, path)
      smiles, _ = data_lib.read_csv(path)
      return data_lib.fingerprints(smiles), f"official clone, sha256-checked: {path}"
    return (data_lib.generated(4361).fingerprints,
            f"generated stand-in, 4,361 x 2,048 (offline: {str(e)[:60]}...)")


def ours(fps: np.ndarray, neighbours: int, iterations: int):
  """(compiled program, its (state, problem) arguments, compile seconds, XLA's counts of
  one iteration) of ``iterations`` extragradient steps."""
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
  compile_s = time.perf_counter() - start
  cost = timing.program_cost(program, state, problem, compiled=compiled).per(iterations)
  return compiled, (state, problem), compile_s, cost


def official(official_dir: pathlib.Path, fps: np.ndarray, iterations: int, threads: int):
  """A callable running ``iterations`` official iterations (torch, float64 S)."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(threads)
  sys.path.insert(0, str(official_dir))
  import cooper  # pylint: disable=g-import-not-at-top
  argv, sys.argv = sys.argv, ["SAE_split.py", "unused.yaml"]
  try:   # SAE_split's ``def main(config_path=sys.argv[1])`` reads argv at import
    import SAE_split  # noqa: N813  pylint: disable=g-import-not-at-top
  finally:
    sys.argv = argv
  random.seed(233)   # as balance_split seeds init_custom's shuffle
  torch.manual_seed(233)
  s = np.asarray(kernel.tanimoto(fps, fps), np.float64) * (1 - np.eye(len(fps)))
  target = kernel.make_target(EDGES, WEIGHTS, 0.1)
  # C, sigmas and E are float32 in balance_split (torch.tensor of Python floats); only S
  # is float64 (the numpy similarity matrix), which promotes the N x N work to float64.
  problem = SAE_split.MaximumBalance(
      alpha=TEST_SIZE, C=torch.tensor(np.asarray(target.centres, np.float32)),
      sigmas=torch.tensor(np.asarray(target.widths, np.float32)), S=torch.tensor(s),
      E=torch.tensor(np.asarray(target.weights, np.float32)), lamb=LAM, scale_factor=100,
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
  parser.add_argument("--official_iterations", type=int, default=None,
                      help="official iterations per timed call (default: --iterations)")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--threads", type=int, default=os.cpu_count(),
                      help="torch intra-op threads; XLA:CPU uses one per core")
  args = parser.parse_args()
  official_iterations = args.official_iterations or args.iterations
  fps, source = load_fingerprints(args.official_dir)
  print(f"data: {source}; N = {len(fps)}")
  official_run, torch = None, None
  if args.official_dir is not None:
    try:
      official_run, torch = official(args.official_dir, fps, official_iterations,
                                     args.threads)
      official_run()   # warm-up
    except ImportError as e:
      print(f"official side skipped: {e} (install the [bench] extra)")
      official_run = None
  else:
    print("official side: not run (no --official_dir); ours alone")
  print(timing.machine_line(torch) + f"; XLA:CPU threads {os.cpu_count()}")
  rows = []
  for name, k in (("top-k (k=128, cpu preset)", 128), ("dense (every column)", 0)):
    compiled, call_args, compile_s, cost = ours(fps, k, args.iterations)
    jax.block_until_ready(compiled(*call_args))
    mine, theirs = [], []
    for _ in range(args.repeats):
      seconds, _ = timing.time_calls(compiled, *call_args)
      mine.append(1e3 * seconds[0] / args.iterations)
      if official_run is not None:
        start = time.perf_counter()
        official_run()
        theirs.append(1e3 * (time.perf_counter() - start) / official_iterations)
    rows.append((timing.side_by_side_row(name, "ms / iteration (2 gradients)", mine, theirs,
                                         compile_s), cost, 1e-3 * statistics.median(mine)))
  timing.print_limit_table(
      ["ours", "what", "ours ms", "compile s", "official ms", "official / ours"], rows)


if __name__ == "__main__":
  main()
