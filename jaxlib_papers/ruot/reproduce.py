"""Reproduction check of DeepRUOT (registered as ``ruot`` for ``launch.reproduce``).

Gene data (``ruot/simulation_gene_data.csv``) with t = 2 held out of training: W1 at the
held-out time, TMV far below the no-growth model, W1 at the training times, growth rising
with x2; plus W1 per time on the 10-D EMT data. When the gene file cannot be had (offline,
no local copy) the gene claims run on our simulator and say so; the EMT claim, measured
single-cell data with no generated stand-in, keeps its row marked "not run" with the reason.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from jaxlib_papers.core import figures
from jaxlib_papers.core.reproduce import Claim, Context, register
from jaxlib_papers.ruot import data as data_lib
from jaxlib_papers.ruot import plotting, train
from jaxlib_papers.ruot.configs.default import get_config

# Numbers from the brief (gene data): DeepRUOT per time (Var-RUOT re-run), held-out W1,
# the shipped weights (ODE), EMT W1.
PAPER_W1 = {1: 0.057, 2: 0.081, 3: 0.125, 4: 0.154}
PAPER_W2 = {1: 0.113, 2: 0.158, 3: 0.216, 4: 0.259}
PAPER_HELD_OUT_W1 = {1: 0.096, 2: 0.089, 3: 0.118, 4: 0.143}
PAPER_SHIPPED_W1 = {1: 0.051, 2: 0.086, 3: 0.123, 4: 0.145}
PAPER_SHIPPED_TMV = {1: 0.023, 2: 0.035, 3: 0.021, 4: 0.016}
PAPER_NO_GROWTH_TMV = {1: 0.105, 2: 0.325, 3: 0.725, 4: 1.42}
PAPER_EMT_W1 = {1: 0.29, 2: 0.32, 3: 0.33}
_EMT_CLAIM = "EMT (10-D): W1 per time within 1.5x the paper's (stages 1-2, {passes} passes)"
_EMT_PAPER = "/".join(f"{w:g}" for w in PAPER_EMT_W1.values())


def growth_x2_correlation(result: train.RuotResult) -> float:
  """Spearman correlation of the learned g(t, x) with x2 over all observed cells (seed mean)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  nets, params, snaps = result.networks, result.params, result.data
  values = []
  for s in range(jax.tree.leaves(params)[0].shape[0]):
    p = jax.tree.map(lambda a, s=s: a[s], params)
    g = np.concatenate([np.asarray(nets.growth(p, float(t), jnp.asarray(x)))
                        for t, x in zip(snaps.times, snaps.xs)])
    x2 = np.concatenate([x[:, 1] for x in snaps.xs])
    values.append(float(scipy.stats.spearmanr(g, x2).statistic))  # ties averaged
  return float(np.mean(values))


def _gene_config(ctx: Context):
  """The preset's config on the gene data (the official file, else our simulator)."""
  config = get_config(ctx.preset)
  config.seed = int(ctx.seed)
  config.data.hold_out = 2
  config.loop.quiet = True
  path = ctx.data_file("ruot/simulation_gene_data.csv")
  if path is not None:
    config.data.source, config.data.path = "csv", str(path)
  else:
    config.data.source = "simulator"
  return config, ctx.data_label("ruot/simulation_gene_data.csv")


def _fmt(seeds: int):
  return lambda r, key: f"{r[key]:.3f}" + (f"+-{r[key + '_std']:.3f}" if seeds > 1 else "")


def _gene_table(result: train.RuotResult, by_time: dict, held: int, seeds: int) -> list[str]:
  fmt = _fmt(seeds)
  table = ["| t | W1 ours | W2 ours | TMV ours | W1 paper | W2 paper | W1 shipped | "
           "W1 held-out paper | TMV no growth |", "|" + "---|" * 9]
  for t in sorted(by_time):
    r = by_time[t]
    table.append(
        f"| {t}{' (held out)' if t == held else ''} | {fmt(r, 'w1')} | {fmt(r, 'w2')} | "
        f"{fmt(r, 'tmv')} | {PAPER_W1.get(t, '-')} | {PAPER_W2.get(t, '-')} | "
        f"{PAPER_SHIPPED_W1.get(t, '-')} | {PAPER_HELD_OUT_W1.get(t, '-')} | "
        f"{r['tmv_no_growth']:.3f} |")
  if result.summary_sde:
    table.append("")
    table.append("SDE (inference, dX = (v + grad s) dt + sigma dW) W1 per time: " + ", ".join(
        f"t={r['time']:g}: {r['w1']:.3f}" for r in result.summary_sde))
  if result.summary_stage2:
    table.append("")
    table.append("ODE after stages 1-2 (before stages 3-4) W1/W2/TMV per time: " + ", ".join(
        f"t={r['time']:g}: {r['w1']:.3f}/{r['w2']:.3f}/{r['tmv']:.3f}"
        for r in result.summary_stage2))
  if result.stage4_error:
    table.append("")
    table.append(f"STAGE 4 DIVERGED, the rows above are the stage-3 model: "
                 f"{result.stage4_error}")
  table.append("")
  table.append("stage seconds: " + ", ".join(f"{k} {v:.1f}"
                                              for k, v in result.timings.items()))
  return table


def _gene_claims(ctx: Context) -> tuple[list[Claim], list[str]]:
  config, source = _gene_config(ctx)
  result = train.run(config, None)
  rows = result.summary
  by_time = {int(round(r["time"])): r for r in rows}
  held = 2
  corr = growth_x2_correlation(result)
  train_times = [t for t in sorted(by_time) if t not in (0, held)]
  seeds = int(config.num_seeds)
  fmt = _fmt(seeds)
  # Why the held-out claims can miss: the one-seed result depends on the seed and the data
  # draw (stages 1-2 sometimes do not learn the growth), on the official CSV too, and as
  # often in the official code (seeds/ruot.md, "The held-out misses are seed misses").
  why = ("seed-sensitive as the official code (issue 33): one model seed on one draw; on the "
         "official CSV 1 of 8 of our seeds misses, 2 of 8 of the official code's; offline the "
         "outcome moves with the draw and the machine's rounding (seeds/ruot.md)")
  claims = [
      Claim(f"gene, t={held} held out: W1 at t={held} <= 0.15 ({seeds} seeds)",
            f"{PAPER_HELD_OUT_W1[held]} (held-out protocol)", fmt(by_time[held], "w1"),
            by_time[held]["w1"] <= 0.15, source, why=why),
      Claim(f"gene: TMV at held-out t={held} <= 0.1 (no-growth model "
            f"{by_time[held]['tmv_no_growth']:.3f})",
            f"{PAPER_SHIPPED_TMV[held]} (no growth {PAPER_NO_GROWTH_TMV[held]})",
            fmt(by_time[held], "tmv"), by_time[held]["tmv"] <= 0.1, source, why=why),
      Claim("gene: W1 <= 0.2 at the training times t=" + ",".join(map(str, train_times)),
            "/".join(str(PAPER_W1.get(t, "-")) for t in train_times),
            "/".join(fmt(by_time[t], "w1") for t in train_times),
            all(by_time[t]["w1"] <= 0.2 for t in train_times), source),
      Claim("gene: TMV below the no-growth model at every t>0",
            "/".join(str(PAPER_SHIPPED_TMV[t]) for t in range(1, 5)),
            "/".join(f"{by_time[t]['tmv']:.3f}<{by_time[t]['tmv_no_growth']:.3f}"
                     for t in sorted(by_time) if t > 0),
            all(r["tmv"] < r["tmv_no_growth"] for r in rows if r["time"] > 0), source),
      Claim("gene: learned growth rises with x2 (Spearman(g, x2) > 0.5 over all cells)",
            "qualitative (growth map figure)", f"{corr:.2f}", corr > 0.5, source),
  ]
  figures.save(plotting.dynamics_figure(result, "gene (t=2 held out)"),
               ctx.report_dir / "ruot_gene.png", dpi=110)
  return claims, _gene_table(result, by_time, held, seeds)


def _emt_claims(ctx: Context) -> tuple[list[Claim], list[str]]:
  config = get_config(ctx.preset)
  passes = f"{config.emt.stage1_passes}+{config.emt.stage2_passes}"
  path = ctx.data_file("ruot/emt.csv", fallback="the EMT claim is not run")
  if path is None:  # measured single-cell data: nothing generated can stand in for it
    reason = ("ruot/emt.csv could not be fetched (offline) and, being measured single-cell "
              "data, has no generated stand-in; place the file as the [data] line says")
    return [Claim.not_run(_EMT_CLAIM.format(passes=passes), _EMT_PAPER, reason,
                          "none (offline: ruot/emt.csv)")], [f"EMT: not run: {reason}"]
  config.seed = int(ctx.seed)
  config.loop.quiet = True
  config.data.source, config.data.path, config.data.hold_out = "csv", str(path), -1
  config.sigma = 0.05  # the official EMT run uses sigma 0.05
  # The EMT check trains stages 1-2 only (W1 is a property of the ODE) to fit the budget.
  config.num_seeds = 1
  config.stage1.passes = int(config.emt.stage1_passes)
  config.stage2.passes = int(config.emt.stage2_passes)
  config.stage3.steps = 0
  config.stage4.passes = 0
  config.eval.sde = False
  snaps = data_lib.load_csv(path)
  result = train.run(config, None, snapshots=snaps)
  rows = [r for r in result.summary if r["time"] > 0]
  ours = [r["w1"] for r in rows]
  paper = [PAPER_EMT_W1.get(int(round(r["time"])), float("nan")) for r in rows]
  claim = Claim(
      _EMT_CLAIM.format(passes=passes),
      "/".join(f"{p:g}" for p in paper), "/".join(f"{o:.3f}" for o in ours),
      all(o <= 1.5 * p for o, p in zip(ours, paper)), ctx.data_label("ruot/emt.csv"))
  table = ["", "EMT W1 per time: " + ", ".join(
      f"t={r['time']:g}: {r['w1']:.3f} (paper {PAPER_EMT_W1.get(int(round(r['time'])), '-')})"
      for r in rows), "EMT stage seconds: " + ", ".join(
          f"{k} {v:.1f}" for k, v in result.timings.items())]
  return [claim], table


@register("ruot", cpu_seconds=146)
def check(ctx: Context) -> list[Claim]:
  """Runs the gene hold-out experiment (and EMT) at ``ctx.preset``."""
  claims, table = _gene_claims(ctx)
  if ctx.preset != "smoke":
    ctx.progress("gene: trained and evaluated; EMT next")
    emt_claims, emt_table = _emt_claims(ctx)
    claims += emt_claims
    table += emt_table
  (ctx.report_dir / "ruot_table.md").write_text("\n".join(table) + "\n")
  return claims
