r"""Time to ||F|| <= 1e-8 on the cubic bilinear saddle: ours and the official code, side by side.

  git clone https://github.com/TrueNobility303/LEN /tmp/LEN   # the official code (NumPy)
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
      python benchmarks/minimax.py --official_dir=/tmp/LEN --sizes=100,250 --repeats=5

Both run in this one process, alternating (ours, official, ours, official, ...) after a
warm-up, on the same instance (b drawn with NumPy seed 42, z0 = 0, M = (16/3) rho m). Ours:
the compiled LEN program (one for every m; compilation reported apart). Official:
``run_LEN`` of ``LEN/Synthetic.py`` (its module-level set-up is executed, its own runs,
pickles and plots are not), timed by its own clock (``time_lst``, which leaves out its
bookkeeping) up to the first iterate with ||F(z_{t+1/2})|| <= 1e-8. The official loop has
no stopping rule, only a time budget: the first run gets ``--official_budget`` seconds,
later ones 1.5x the time it needed. Each table row gives both medians with min-max and the
median of the per-pair ratios official / ours. Without ``--official_dir`` it prints ours
only and says so.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (set on some machines for old OpenBLAS builds) slow
a current NumPy: unset them for this command only, as above.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import os
import pathlib
import sys
import time
import types

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxlib_papers.core.precision import enable_x64  # noqa: E402
from jaxlib_papers.minimax import train  # noqa: E402
from jaxlib_papers.minimax.configs import default as default_config  # noqa: E402

TOL = 1e-8


def load_official(official_dir: pathlib.Path, n: int, seed: int) -> types.SimpleNamespace:
  """Executes the set-up of the official ``LEN/Synthetic.py`` for size ``n``.

  Top-level statements run up to the first call of ``run_LEN`` (problem data, z*, z0, the
  oracles and ``run_LEN`` itself), minus its extragradient ``while`` loop; nothing of it is
  copied into this repository: the user's checkout is read at run time.
  """
  path = official_dir / "LEN" / "Synthetic.py"
  if not path.is_file():
    raise FileNotFoundError(f"--official_dir: {path} not found (clone TrueNobility303/LEN)")
  tree = ast.parse(path.read_text())
  body = []
  for node in tree.body:
    calls = [c.func.id for c in ast.walk(node)
             if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
    if "run_LEN" in calls and not isinstance(node, ast.FunctionDef):
      break
    if isinstance(node, ast.While):  # the module-level EG run (time-budgeted)
      continue
    body.append(node)
  module = ast.Module(body=body, type_ignores=[])
  namespace = {"__name__": "official_synthetic"}
  argv = sys.argv
  sys.argv = [str(path), "--n", str(n), "--seed", str(seed)]
  try:
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102
  finally:
    sys.argv = argv
  return types.SimpleNamespace(**namespace)


def official_seconds(official, m: int, budget: float) -> tuple[float | None, int]:
  """(seconds to ||F|| <= 1e-8 by the official clock or None, iterations)."""
  args = argparse.Namespace(**{**vars(official.args), "training_time": budget})
  with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
    times, _, gnorms = official.run_LEN(args, m=m, z0=official.z0)
  for i, (t, g) in enumerate(zip(times, gnorms)):
    if g <= TOL:
      return float(t), i + 1
  return None, len(times)


def _time_ours(compiled, z0, m: int, reg_weight: float):
  """(seconds, result) of one run of the compiled LEN program."""
  with enable_x64():
    start = time.perf_counter()
    result = jax.block_until_ready(compiled(z0, jnp.int32(m), jnp.float64(reg_weight)))
    return time.perf_counter() - start, result


def _fmt(values) -> str:
  values = [v for v in values if v is not None]
  if not values:
    return "not converged"
  return f"{np.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--official_dir", default=None,
                      help="a checkout of github.com/TrueNobility303/LEN (optional)")
  parser.add_argument("--sizes", default="100,250")
  parser.add_argument("--ms", default="1,10,100")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--official_budget", type=float, default=30.0,
                      help="seconds the official loop gets in its first run")
  parser.add_argument("--seed", type=int, default=42)
  args = parser.parse_args()
  if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):
    print("note: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set; they slow the official NumPy "
          "code (unset them for this command)", flush=True)
  official_dir = pathlib.Path(args.official_dir) if args.official_dir else None
  if official_dir is None:
    print("no --official_dir: timing ours only (no ratio)", flush=True)

  rows = []
  for n in (int(v) for v in args.sizes.split(",")):
    config = default_config.get_config("cpu")
    config.seed, config.problem.n = args.seed, n
    with enable_x64():
      problem, _ = train.build_problem(config)
      compiled, compile_s = train.compile_len_program(problem, config)
      z0 = jnp.zeros(problem.dim, jnp.float64)
    official = load_official(official_dir, n, args.seed) if official_dir else None
    if official is not None:  # the same instance on both sides
      ours_b = np.asarray(problem.field(jnp.zeros(problem.dim)))[n:]
      np.testing.assert_allclose(ours_b, official.b[:, 0], err_msg="instances differ")
    for m in (int(v) for v in args.ms.split(",")):
      reg_weight = config.solve.reg_factor * problem.lipschitz_jacobian * m

      ours = functools.partial(_time_ours, compiled, z0, m, reg_weight)
      ours()  # warm-up
      budget = args.official_budget
      if official is not None:  # warm-up, and the time budget of the later runs
        first, _ = official_seconds(official, m, budget)
        budget = min(budget, 1.5 * first + 0.2) if first is not None else budget
      ours_t, official_t, ratios, official_iters = [], [], [], None
      for _ in range(args.repeats):
        seconds, result = ours()
        ours_t.append(seconds)
        if official is not None:
          seconds_official, official_iters = official_seconds(official, m, budget)
          official_t.append(seconds_official)
          if seconds_official is not None and bool(result.converged):
            ratios.append(seconds_official / seconds)
      label = train.method_label("len", m)
      row = (n, label, int(result.num_iters), _fmt(ours_t), f"{compile_s:.1f}",
             official_iters if official is not None else "-",
             _fmt(official_t) if official is not None else "-",
             f"{np.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"
             if ratios else "-")
      rows.append(row)
      print(" | ".join(map(str, row)), flush=True)

  print("\n| n | method | iterations (ours) | ours s, median (min-max) | ours compile s | "
        "iterations (official) | official s, median (min-max) | official / ours, median "
        "(min-max) |")
  print("|---|---|---|---|---|---|---|---|")
  for row in rows:
    print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
  main()
