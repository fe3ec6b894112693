"""Reproduction check of AERCA on the generated linear, nonlinear and Lorenz-96 sets.

``cpu``: linear (p = 4), nonlinear (p = 6, K = 5, L = 3) with the paper-KL ablation,
Lorenz-96 (p = 10, T = 500, <= 200 epochs); 3 seeds in one program, each on its own draw of the
generator (graph, coefficients, series: the official code's seed draws them with the
model), Adam 1e-3, early stopping (patience 20). ``full`` adds the encoder-only ablation
and Lotka-Volterra. ``smoke``: tiny sizes (claims reported, not expected to hold). Means
over seeds (and so over draws; the baselines too); graph metrics are also means over the
normal test series.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from jaxlib_papers.aerca import plotting, train
from jaxlib_papers.aerca.configs.default import dataset_config
from jaxlib_papers.core import figures, results
from jaxlib_papers.core.reproduce import COMPILE_BOUND_CPU_FLAGS, Claim, Context, register

PAPER = {
    "linear": {"ac": "1/1/1/1", "avg10": "1", "auroc": "1 (VAR .999)"},
    "nonlinear": {"ac": "1/1/1/1", "avg10": "1", "auroc": ".998 (VAR .676)"},
    "lorenz96": {"ac": ".996/.996/.997/.996", "avg10": ".990", "auroc": ".999 (VAR .764)"},
}

_RUNS = {
    "smoke": [("nonlinear", ("aerca",))],
    "cpu": [("linear", ("aerca",)), ("nonlinear", ("aerca", "paper_kl")),
            ("lorenz96", ("aerca",))],
    "full": [("linear", ("aerca",)), ("nonlinear", ("aerca", "paper_kl", "encoder_only")),
             ("lorenz96", ("aerca", "paper_kl")), ("lotka_volterra", ("aerca",))],
}


def _per_seed(metrics, key: str = "auroc") -> str:
  """``key`` of every seed's row (each on its own draw), e.g. "0.79/0.97/0.85"."""
  return "/".join(f"{row[key]:.2f}" for row in metrics["per_seed"])


def _fmt(values, n=4) -> str:
  return "/".join(f"{v:.3f}" for v in values[:n])


def _acs(m) -> list[float]:
  return [m["ac"][k - 1] for k in (1, 3, 5, 10)]


def _plot(ctx: Context, name: str, res: train.Result) -> None:
  fig = plotting.result_overview(res, title=f"AERCA on {name}")
  figures.save(fig, ctx.report_dir / f"aerca_{name}.png", dpi=80)


def k_below(p: int, metrics: dict) -> int:
  """The k of "Avg@(p-1)", the largest k below the number of variables p that the metrics
  hold (they stop at k = 10: on p = 20 it is Avg@10)."""
  return min(p - 1, len(metrics["avg"]))


class _Run(NamedTuple):
  """One data set's numbers the claims quote."""
  tag: str                 # "<name> p=.., S seeds, N test series"
  p: int                   # number of variables
  methods: dict            # train.Result.methods
  ranking: str             # AERCA's AC@k / Avg@k line
  avg_below_p: float       # AERCA's Avg@(p-1) (Avg@10 when p > 11: k stops at 10)
  paper: dict              # the paper's numbers (PAPER)


def _linear_claims(run: _Run) -> list[Claim]:
  a, var, raw, p = run.methods["aerca"], run.methods["var"], run.methods["raw"], run.p
  return [
      Claim(f"{run.tag}: AC@1 >= 0.9", f"AC@1/3/5/10 {run.paper['ac']}", run.ranking,
            a["ac"][0] >= 0.9),
      Claim(f"{run.tag}: Avg@10 >= 0.95", run.paper["avg10"],
            f"{a['avg'][9]:.3f} (Avg@{k_below(p, a)} {run.avg_below_p:.3f}; VAR "
            f"{var['avg'][9]:.3f}, raw {raw['avg'][9]:.3f})", a["avg"][9] >= 0.95),
      Claim(f"{run.tag}: graph AUROC >= 0.95", run.paper["auroc"],
            f"{a['auroc']:.3f} +- {a['auroc_std']:.3f} (AUPRC "
            f"{a['auprc']:.3f}; VAR {var['auroc']:.3f})", a["auroc"] >= 0.95)]


def _paper_kl_claim(run: _Run) -> Claim:
  a, pk, m = run.methods["aerca"], run.methods["paper_kl"], run.methods
  extra = ""
  if "encoder_only" in m:
    eo = m["encoder_only"]
    extra = (f"; encoder-only AUROC {eo['auroc']:.3f}, AC@1 {eo['ac'][0]:.3f}, "
             f"Avg@10 {eo['avg'][9]:.3f}")
  return Claim(
      f"{run.tag}: paper-KL ablation, AUROC >= 0.9 and AC@1 >= 0.85 as the coded KL",
      "- (the paper states its KL; the code uses another form)",
      f"paper KL AUROC {pk['auroc']:.3f}, AC@1 {pk['ac'][0]:.3f}, Avg@10 "
      f"{pk['avg'][9]:.3f} vs coded {a['auroc']:.3f}, {a['ac'][0]:.3f}, "
      f"{a['avg'][9]:.3f}{extra}",
      pk["auroc"] >= 0.9 and pk["ac"][0] >= 0.85,
      why=f"follows the coded KL's graph miss ({pk['auroc']:.2f} vs {a['auroc']:.2f}; "
          "reported, not tuned: seeds/aerca.md)")


# Why the graph claims miss where they do (issue 33; seeds/aerca.md, "Missed claims").
_WHY_GRAPH = {
    "nonlinear": "the draws, not the code or the budget: at the official settings ours "
                 "matches the official code on its draws (5 draws: 0.986 vs 0.987), whose own "
                 "10 draws span 0.80-1.00; draws 0 and 2 stay low there too (0.82, 0.84), "
                 "draws 3-5 hold at cpu (0.96): seeds/aerca.md",
    "lorenz96": "our VAR baseline finds the graph (0.95; 0.999 at the paper's p=20, T=2000, "
                "seed 0, where the paper's VAR has 0.76, which no official code produces: "
                "seeds/aerca.md); AERCA 0.997 as the paper's 0.999",
}


def _other_claims(run: _Run) -> list[Claim]:
  a, var, raw, p = run.methods["aerca"], run.methods["var"], run.methods["raw"], run.p
  eps = run.methods["eps_diagnosis"]
  kb = k_below(p, a)
  strict = "strict win" if a["avg"][9] > var["avg"][9] else "no strict win"
  claims = [
      Claim(f"{run.tag}: graph AUROC >= 0.9 and >= VAR's + 0.1", run.paper["auroc"],
            f"{a['auroc']:.3f} +- {a['auroc_std']:.3f} (per seed {_per_seed(a)}; AUPRC "
            f"{a['auprc']:.3f}) vs VAR {var['auroc']:.3f} ({_per_seed(var)}; AUPRC "
            f"{var['auprc']:.3f})",
            a["auroc"] >= 0.9 and a["auroc"] >= var["auroc"] + 0.1,
            why=_WHY_GRAPH.get(run.tag.split()[0], "")),
      Claim(f"{run.tag}: AC@1 >= 0.85", f"AC@1/3/5/10 {run.paper['ac']}", run.ranking,
            a["ac"][0] >= 0.85),
      # The paper's comparison is with its baselines (epsilon-Diagnosis, RCD, CIRCA); a
      # raw-value z-score is ours, reported beside it (issue 33, seeds/aerca.md).
      Claim(f"{run.tag}: Avg@10 >= epsilon-Diagnosis' + 0.05 (the paper's baseline)",
            f"{run.paper['avg10']} (eps-Diag linear .95, LV .158; RCD .878 nonlinear, "
            ".421 Lorenz-96)",
            f"{a['avg'][9]:.3f} vs eps-Diag {eps['avg'][9]:.3f} (raw z {raw['avg'][9]:.3f}); "
            f"Avg@{kb} {run.avg_below_p:.3f} vs eps-Diag {eps['avg'][kb - 1]:.3f}",
            a["avg"][9] >= eps["avg"][9] + 0.05),
      Claim(f"{run.tag}: Avg@10 not worse than VAR-residual z-scores (report a strict win)",
            "- (no VAR-residual RCA baseline in the paper)",
            f"{a['avg'][9]:.4f} vs VAR {var['avg'][9]:.4f} ({strict}); Avg@{kb} "
            f"{run.avg_below_p:.4f} vs VAR {var['avg'][kb - 1]:.4f}",
            a["avg"][9] >= var["avg"][9])]
  if "paper_kl" in run.methods:
    claims.append(_paper_kl_claim(run))
  return claims


def _summary(res: train.Result) -> dict:
  keys = ("ac", "avg", "auroc", "auprc", "ac_star")
  return ({k: {kk: v[kk] for kk in keys if kk in v} for k, v in res.methods.items()}
          | {"epochs": results.to_json_tree(res.train)})


@register("aerca", cpu_seconds=96, xla_flags={"aerca": COMPILE_BOUND_CPU_FLAGS})
def check(ctx: Context) -> list[Claim]:
  claims: list[Claim] = []
  summary = {}
  for i, (name, variants) in enumerate(_RUNS[ctx.preset]):
    config = dataset_config(name, ctx.preset, variants=variants, seed=ctx.seed)
    config.loop.quiet = True
    res = train.run(config)
    ctx.progress(f"{name}: trained and scored (data set {i + 1}/{len(_RUNS[ctx.preset])})")
    a, p = res.methods["aerca"], int(config.data.num_vars)
    draws = " (a data draw each)" if config.data.draw_per_seed else ""
    tag = (f"{name} p={p}, {int(config.num_seeds)} seeds{draws}, {config.data.num_test} "
           "test series")
    summary[name] = _summary(res)
    kb = k_below(p, a)
    avg_below_p = a["avg"][kb - 1] if kb >= 1 else float("nan")
    ranking = (f"AC@1/3/5/10 {_fmt(_acs(a))} (std AC@1 {a['ac_std'][0]:.3f}), Avg@10 "
               f"{a['avg'][9]:.3f}, Avg@{kb} {avg_below_p:.3f}; epochs "
               f"{res.train['aerca'].epochs}")
    run = _Run(tag, p, res.methods, ranking, avg_below_p,
               PAPER.get(name, {"ac": "-", "avg10": "-", "auroc": "-"}))
    claims.extend(_linear_claims(run) if name == "linear" else _other_claims(run))
    _plot(ctx, name, res)
  (ctx.report_dir / "aerca_summary.json").write_text(json.dumps(summary, default=float))
  return claims
