r"""Time to ||F|| <= 1e-8 on the synthetic cubic bilinear saddle, beside the official code.

  OPENBLAS_NUM_THREADS=1 python benchmarks/minimax.py --sizes=100,250,500 --repeats=3

For each n and method: median seconds of the compiled solve (compilation excluded, reported
separately), iterations, #J, oracle cost. Official NumPy figures (brief, measured on
2 cores, 1 BLAS thread): n = 100: LEN(m=10) 0.80 s, EG-2 2.14 s; n = 500: nothing
converged within 30 s. Set OPENBLAS_NUM_THREADS=1 (and XLA's CPU runs single-threaded
LAPACK for Schur/Hessenberg either way).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from jaxlib_papers.core.precision import enable_x64  # noqa: E402
from jaxlib_papers.minimax import train  # noqa: E402
from jaxlib_papers.minimax.configs import default as default_config  # noqa: E402

OFFICIAL = {(100, "LEN(m=10)"): 0.80, (100, "EG-2"): 2.14}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="100,250,500")
  parser.add_argument("--ms", default="1,10,100")
  parser.add_argument("--eg_etas", default="0.5")
  parser.add_argument("--factorizations", default="schur,auto",
                      help="comma list of schur|hessenberg|eig|dense|auto")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--eg_max_iters", type=int, default=400_000)
  parser.add_argument("--seed", type=int, default=42)
  args = parser.parse_args()

  rows = []
  for n in (int(v) for v in args.sizes.split(",")):
    config = default_config.get_config("cpu")
    config.seed = args.seed
    config.problem.n = n
    config.solve.eg_max_iters = args.eg_max_iters
    with enable_x64():
      problem, _ = train.build_problem(config)
    jobs = [("eg", float(eta), "-") for eta in args.eg_etas.split(",") if eta]
    jobs += [("len", int(m), fac) for m in args.ms.split(",")
             for fac in args.factorizations.split(",")]
    for kind, value, fac in jobs:
      if fac != "-":
        config.solve.factorization = fac
      label = train.method_label(kind, value)
      _, s = train.solve_one(problem, kind, value, config, repeats=args.repeats)
      official = OFFICIAL.get((n, label))
      ratio = f"{official / s['run_seconds']:.1f}x" if official else "-"
      rows.append((n, label, fac, s, official, ratio))
      print(f"n={n:4d} {label:>12} {fac:>10}: {s['run_seconds']:8.3f} s (median of "
            f"{args.repeats}, min {s['run_seconds_min']:.3f}; compile "
            f"{s['compile_seconds']:.1f} s), {s['iterations']:7d} it, "
            f"#J {s['num_jacobian_calls']:3d}, cost {s['oracle_cost']:9.0f}, converged "
            f"{s['converged']}, official {official if official else '-'} s, speed-up {ratio}",
            flush=True)

  print("\n| n | method | factorization | seconds (median) | min | iterations | #J | cost | "
        "official s | speed-up (median) |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  for n, label, fac, s, official, ratio in rows:
    print(f"| {n} | {label} | {fac} | {s['run_seconds']:.3f} | {s['run_seconds_min']:.3f} | "
          f"{s['iterations']} | "
          f"{s['num_jacobian_calls']} | {s['oracle_cost']:.0f} | "
          f"{official if official else '-'} | {ratio} |")


if __name__ == "__main__":
  main()
