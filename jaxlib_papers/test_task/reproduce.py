"""Training on the test task: reproduction check (``launch.reproduce``).

From the paper's own evaluations (the 337 files of ``MANIFEST.tsv``, fetched and checked by
``core.datasets``), the brief's claims 1-7 with the paper's numbers beside ours:

1. theta before fine-tuning: MMLU .068 (+-.005), GSM8K .168 (+-.008), p < .01;
2. theta after: |theta| < .02 (MMLU), < .03 (GSM8K), p > .05, the 95% interval holds 0;
3. the bootstrap interval (c_e refitted) excludes 0 before and holds 0 after;
4. uncentered R^2 within +-.005 of .940 / .990 (MMLU) and .908 / .957 (GSM8K);
5. psi and phi within +-.003 of the appendix tables, phi with p < .05, psi with p > .05;
6. Pareto areas within +-.01 of .18 -> .03 (MMLU) and .42 -> .08 (GSM8K);
7. emergence: log10 c_e at k = 0 within +-.25 of 22.11 / 22.34, c_e at the last budget
   <= 1e21 and >= 1.2 decades earlier, GSM8K's c_e strictly decreasing over k.

Then the generated toy (the only data offline): newer models gain theta with p < 1e-3 on
every seed, and after the shared fine-tuning p > .05 on at least 4 of 5 seeds (80%).
"""

from __future__ import annotations

import json
import math

from jaxlib_papers.core import datasets, figures, results
from jaxlib_papers.core.reproduce import COMPILE_BOUND_CPU_FLAGS, Claim, Context, register
from jaxlib_papers.test_task import data as data_lib
from jaxlib_papers.test_task import plotting, train
from jaxlib_papers.test_task.configs import default as default_config

# The paper's numbers (figures.ipynb at c357810e; Figure 1, appendix tables, emergence rows).
PAPER = {
    "mmlu": {"theta_pre": (0.068, 0.005), "theta_post_max": 0.02, "r2": (0.940, 0.990),
             "psi": -0.004, "phi": 0.071, "pareto": (0.18, 0.03), "log10_ce": 22.11},
    "gsm8k": {"theta_pre": (0.168, 0.008), "theta_post_max": 0.03, "r2": (0.908, 0.957),
              "psi": 0.000, "phi": 0.168, "pareto": (0.42, 0.08), "log10_ce": 22.34},
}
PAPER_CE = {"mmlu": "1.3e22 -> 5.6e20", "gsm8k": "2.2e22 -> 9.1e21 -> 4.2e21 -> 5.8e20"}
PROBE = f"{data_lib.PREFIX}/{data_lib.TABLES}"


def _fit_claims(bench: str, r, data: str) -> list[Claim]:
  """Claims 1-4 of one benchmark."""
  paper, name = PAPER[bench], bench.upper()
  value, tol = paper["theta_pre"]
  bound = paper["theta_post_max"]
  return [
      Claim(f"{name} theta before within +-{tol} of {value}, p < .01",
            f"{value} (se {'.018' if bench == 'mmlu' else '.027'})",
            f"{r.pre.theta:.4f} (se {r.pre.se:.4f}, p {r.pre.p:.1e})",
            abs(r.pre.theta - value) <= tol and r.pre.p < 0.01, data),
      Claim(f"{name} theta after: abs(theta) < {bound}, p > .05, 95% CI holds 0",
            "-.005 (se .009)" if bench == "mmlu" else "-.001 (se .031)",
            f"{r.post.theta:.4f} (se {r.post.se:.4f}, p {r.post.p:.2f}, CI "
            f"[{r.post.ci_low:.3f}, {r.post.ci_high:.3f}])",
            abs(r.post.theta) < bound and r.post.p > 0.05
            and r.post.ci_low <= 0 <= r.post.ci_high, data),
      Claim(f"{name} bootstrap CI of theta (c_e refitted) excludes 0 before, holds 0 after",
            "brief's B=1000: " + ("[.018,.105] / [-.028,.018]" if bench == "mmlu"
                                  else "[.101,.234] / [-.082,.073]"),
            f"[{r.pre.boot_low:.3f}, {r.pre.boot_high:.3f}] / "
            f"[{r.post.boot_low:.3f}, {r.post.boot_high:.3f}]",
            r.pre.boot_low > 0 and r.post.boot_low <= 0 <= r.post.boot_high, data),
      Claim(f"{name} uncentered R^2 before / after within +-.005",
            f"{paper['r2'][0]:.3f} / {paper['r2'][1]:.3f}",
            f"{r.pre.r2_uncentered:.4f} / {r.post.r2_uncentered:.4f} (centered "
            f"{r.pre.r2_centered:.3f} / {r.post.r2_centered:.3f})",
            abs(r.pre.r2_uncentered - paper["r2"][0]) <= 0.005
            and abs(r.post.r2_uncentered - paper["r2"][1]) <= 0.005, data),
  ]


def _table_claims(bench: str, r, data: str) -> list[Claim]:
  """Claims 5-7 of one benchmark."""
  paper, name = PAPER[bench], bench.upper()
  ce = list(r.emergence.values())
  shift = ce[0] - ce[-1]
  claims = [
      Claim(f"{name} psi, phi within +-.003; phi p < .05, psi p > .05",
            f"psi {paper['psi']:.3f}, phi {paper['phi']:.3f}",
            f"psi {r.psi.coef:.4f} (p {r.psi.p:.2f}), phi {r.phi.coef:.4f} (p {r.phi.p:.1e})",
            abs(r.psi.coef - paper["psi"]) <= 0.003 and abs(r.phi.coef - paper["phi"]) <= 0.003
            and r.phi.p < 0.05 and r.psi.p > 0.05, data),
      Claim(f"{name} Pareto area before -> after within +-.01",
            f"{paper['pareto'][0]:.2f} -> {paper['pareto'][1]:.2f}",
            f"{r.pareto_pre:.3f} -> {r.pareto_post:.3f}",
            abs(r.pareto_pre - paper["pareto"][0]) <= 0.01
            and abs(r.pareto_post - paper["pareto"][1]) <= 0.01, data),
      Claim(f"{name} emergence: log10 c_e(k=0) within +-.25 of {paper['log10_ce']}; last "
            f"budget c_e <= 1e21 and >= 1.2 decades earlier",
            PAPER_CE[bench],
            " -> ".join(f"{10 ** v:.1e}" for v in ce) + f" (shift {shift:.2f} decades)",
            abs(ce[0] - paper["log10_ce"]) <= 0.25 and ce[-1] <= 21.0 and shift >= 1.2, data),
  ]
  if bench == "gsm8k":
    claims.append(Claim("GSM8K c_e strictly decreasing over k = 0, 16k, 64k, 1.6M",
                        PAPER_CE[bench], " > ".join(f"{10 ** v:.1e}" for v in ce),
                        all(a > b for a, b in zip(ce, ce[1:])), data))
  return claims


def _toy_claims(fits, data: str) -> list[Claim]:
  pre = [f.p_pre for f in fits]
  post = [f.p_post for f in fits]
  needed = math.ceil(0.8 * len(fits))
  return [
      Claim(f"toy: newer models' theta before fine-tuning has p < 1e-3 on all "
            f"{len(fits)} seeds", "brief's prototype: theta .04-.075, p < 1e-5",
            ", ".join(f"{f.theta_pre:.3f} (p {f.p_pre:.0e})" for f in fits),
            all(p < 1e-3 for p in pre), data),
      Claim(f"toy: after the shared fine-tuning theta has p > .05 on >= {needed} of "
            f"{len(fits)} seeds", "brief's prototype: theta -.033-.023, p > .15",
            ", ".join(f"{f.theta_post:.3f} (p {f.p_post:.2f})" for f in fits),
            sum(p > 0.05 for p in post) >= needed, data),
  ]


def _official_table(ctx: Context) -> tuple[data_lib.ModelTable | None, str]:
  """(the table from the fetched files, the report's data label), or (None, the label of
  the generated stand-in) offline: the toy then stands in."""
  offline = f"generated (offline: {data_lib.PREFIX}/)"
  if ctx.data_file(PROBE) is None:
    return None, offline
  try:
    paths = data_lib.fetch_files(locate=lambda name: datasets.fetch(name, ctx.data_dir))
  except datasets.DataUnavailable as e:
    print(f"[data] not available, using generated data instead: {e}", flush=True)
    return None, offline
  origin = ctx.data_label(PROBE).split(":")[0]
  return data_lib.load_table(paths), f"{origin}: {data_lib.PREFIX}/ ({len(paths)} files)"


@register("test_task", cpu_seconds=30, xla_flags={"test_task": COMPILE_BOUND_CPU_FLAGS})
def check(ctx: Context) -> list[Claim]:
  config = default_config.get_config(ctx.preset)
  config.seed = ctx.seed
  table, data = _official_table(ctx)
  if table is None:
    config.data.source = "toy"
  ctx.progress("fitting the paper's evaluations" if table is not None
               else "offline: the toy only")
  result = train.run(config, None, table=table)
  claims: list[Claim] = []
  for bench, r in result.benchmarks.items():
    claims += _fit_claims(bench, r, data) + _table_claims(bench, r, data)
  claims += _toy_claims(result.toy, "generated" if table is not None else data)
  _save_figures(ctx, result)
  (ctx.report_dir / "test_task.json").write_text(
      json.dumps(results.to_json_tree(result), indent=1))
  return claims


def _save_figures(ctx: Context, result: train.RunResult) -> None:
  for stem, fig in plotting.all_figures(result).items():
    figures.save(fig, ctx.report_dir / f"test_task_{stem}.png")
