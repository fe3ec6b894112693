"""CP-Fuse reproduction check (``launch.reproduce --only=cp_fuse``).

Trains ``train.num_pairs`` pairs of small causal LMs on the synthetic two-corpus benchmark
(all models in one vmapped program), decodes every protected prompt greedily with each
model, CP-Delta, MemFree, CP-Fuse (official grid) and CP-Fuse (exact solver), and checks,
for every pair:

1. the single models memorise their own passages (median LCS with the true continuation
   >= 44 of 48 tokens) and not the other corpus's (95th percentile <= 8);
2. CP-Fuse (grid, greedy) over the private protected prompts: 95th-percentile LCS with the
   protected text <= 12 tokens and >= 4x below the single models;
3. CP-Delta stays close to the single models (its 95th percentile >= half theirs);
4. the shared passage is still reproduced by CP-Fuse (LCS >= 5/6 of the continuation);
5. utility: CP-Fuse held-out perplexity <= 1.10x the worse single model's, its sampled
   free generations parse under the grammar as often as the single models' (their mean
   - 0.01: the paper's pass@1 comparison), and fusion does not lower the parse rate below
   the worse single model's (by more than 0.05);
6. the grid objective is never below the exact solver's (on both decodes' states);
7. the exact solver also protects (95th percentile <= 12);
8. balance along the exact decode: |F_1 - F_2| <= 1e-3 max(|F_1|, |F_2|) at interior steps.

The thresholds are stated for a 48-token continuation; other sizes (smoke) scale them.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jaxlib_papers.core.reproduce import Claim, Context, register

if TYPE_CHECKING:  # the registry imports this module; jax and the models load in check()
  from jaxlib_papers.cp_fuse import train

PAPER_EM = ("Table 1 (unverified, brief): EM ~1400-1500 chars for the overfit models vs "
            "~55-70 for CP-Fuse (>25x, abstract); CP-Delta 4-7x CP-Fuse; MemFree 2-3x")
PAPER_UTILITY = ("Table 2 (unverified): pass@1 CP-Fuse vs overfit APPS 0.47/0.43, MBPP "
                 "0.43/0.44, HumanEval 0.28/0.29")


def pair_statistics(pair: train.PairResult, settings: train.Settings) -> dict:
  """The numbers the claims read, for one pair (host floats).

  Args:
    pair: one pair's measurements (``train.run(...).pairs[k]``).
    settings: the run's settings (``train.run(...).settings``): the continuation length
      and the infringement thresholds.
  """
  from jaxlib_papers.cp_fuse import train  # pylint: disable=g-import-not-at-top
  owner = pair.owner
  private = owner < 2
  rep = pair.reproduction
  own = train.own_model_view(rep, owner, "model")
  memfree = train.own_model_view(rep, owner, "memfree")
  other = np.where(owner == 0, rep["model_2"]["lcs_sets"][:, 0],
                   rep["model_1"]["lcs_sets"][:, 1])
  views = {"single (own)": own, "memfree (own)": memfree,
           **{k: rep[k] for k in ("cp_delta", "cp_fuse", "cp_fuse_exact")}}
  stats = {"continuation_len": settings.benchmark.continuation_len,
           "own_cont_median": float(np.median(own["lcs_cont"][private])),
           "other_p95": float(np.percentile(other[private], 95))}
  table = {}
  for name, view in views.items():
    lcs = view["lcs_sets"].max(1)[private]
    chars = view["chars"].max(1)[private]
    top = chars[chars >= np.percentile(chars, 95)]
    table[name] = {
        "p50": float(np.median(lcs)), "p95": float(np.percentile(lcs, 95)),
        "max": float(lcs.max()), "em_chars": float(top.mean()),
        "chars_p95": float(np.percentile(chars, 95)),
        "infringe_tokens": int(np.sum(lcs > settings.eval.infringement_tokens)),
        "infringe_chars": int(np.sum(chars > settings.eval.infringement_chars)),
        "shared": float(view["lcs_cont"][owner == 2].max()),
    }
  stats["table"] = table
  stats["perplexity"] = pair.perplexity
  stats["grammatical"] = pair.grammatical
  stats["sentences"] = pair.sentences
  gaps = []
  for name in ("cp_fuse", "cp_fuse_exact"):
    d = pair.decode[name]
    gaps.append(float(np.min(d["grid_objective"] - d["exact_objective"])))
  d = pair.decode["cp_fuse_exact"]
  lam, f = d["exact_lambda"], d["per_model"]
  interior = (lam > 1e-6) & (lam < 1 - 1e-6)
  rel = np.abs(f[..., 0] - f[..., 1]) / np.maximum(np.abs(f).max(-1), 1e-6)
  stats["grid_minus_exact_min"] = min(gaps)
  stats["interior_steps"] = int(interior.sum())
  stats["balance_rel_max"] = float(rel[interior].max()) if interior.any() else 0.0
  return stats


class _Caps(NamedTuple):
  """The thresholds, stated for a 48-token continuation and scaled to ``n`` tokens."""
  n: int
  mem: float
  other_cap: float
  fuse_cap: float
  shared_min: float


def _caps(continuation_len: int) -> _Caps:
  scale = continuation_len / 48.0
  return _Caps(continuation_len, 44 * scale, 8 * scale, 12 * scale, 40 * scale)


def _each(all_stats: list[dict], fmt, fn) -> tuple[str, bool]:
  """(every pair's ``fmt`` line, whether ``fn`` holds for every pair)."""
  return "; ".join(f"pair {i}: " + fmt(s) for i, s in enumerate(all_stats)), all(
      bool(fn(s)) for s in all_stats)


def _protection_claims(all_stats: list[dict], caps: _Caps) -> list[Claim]:
  """Claims 1-4: memorisation, CP-Fuse's protection, CP-Delta's, the shared passage."""
  n, mem, other_cap, fuse_cap, shared_min = (caps.n, caps.mem, caps.other_cap,
                                             caps.fuse_cap, caps.shared_min)
  each = functools.partial(_each, all_stats)
  claims = []
  ours, ok = each(lambda s: f"own median {s['own_cont_median']:.0f}/{n}, other p95 "
                            f"{s['other_p95']:.1f}",
                  lambda s: s["own_cont_median"] >= mem and s["other_p95"] <= other_cap)
  claims.append(Claim(
      f"single models memorise: median LCS with own continuation >= {mem:.0f}/{n}; "
      f"other corpus p95 <= {other_cap:.0f}", "overfit models: EM ~1400-1500 chars", ours,
      ok))

  def fuse_fmt(s):
    t = s["table"]
    return (f"CP-Fuse p95 {t['cp_fuse']['p95']:.1f} vs single {t['single (own)']['p95']:.1f}"
            f" ({t['single (own)']['p95'] / max(t['cp_fuse']['p95'], 1e-9):.1f}x)")
  ours, ok = each(fuse_fmt, lambda s: s["table"]["cp_fuse"]["p95"] <= fuse_cap
                  and s["table"]["single (own)"]["p95"] >= 4 * s["table"]["cp_fuse"]["p95"])
  claims.append(Claim(
      f"CP-Fuse (grid, greedy) p95 LCS <= {fuse_cap:.0f} tokens and >= 4x below the single "
      "models", PAPER_EM, ours, ok))
  ours, ok = each(lambda s: f"CP-Delta p95 {s['table']['cp_delta']['p95']:.1f} vs single "
                            f"{s['table']['single (own)']['p95']:.1f}",
                  lambda s: s["table"]["cp_delta"]["p95"]
                  >= 0.5 * s["table"]["single (own)"]["p95"])
  claims.append(Claim("CP-Delta (static sqrt(p1 p2)) stays close to the single models "
                      "(p95 >= half theirs)", "CP-Delta EM 4-7x CP-Fuse's", ours, ok))
  ours, ok = each(lambda s: f"shared passage LCS {s['table']['cp_fuse']['shared']:.0f}/{n}",
                  lambda s: s["table"]["cp_fuse"]["shared"] >= shared_min)
  claims.append(Claim(f"CP-Fuse still reproduces the passage both models saw (>= "
                      f"{shared_min:.0f}/{n})", "- (the control the method implies)", ours, ok))
  return claims


def _utility_claims(all_stats: list[dict]) -> list[Claim]:
  """Claims 5-7: perplexity and grammaticality of the fused model."""
  each = functools.partial(_each, all_stats)
  claims = []

  def ppl_ok(s):
    p = s["perplexity"]
    return p["cp_fuse"] <= 1.10 * max(p["model_1"], p["model_2"])
  ours, ok = each(lambda s: "ppl CP-Fuse {cp_fuse:.3f}, models {model_1:.3f}/{model_2:.3f}, "
                            "CP-Delta {cp_delta:.3f}".format(**s["perplexity"]), ppl_ok)
  claims.append(Claim("utility: CP-Fuse held-out perplexity <= 1.10x the worse single model",
                      PAPER_UTILITY, ours, ok))
  # The paper's utility comparison is CP-Fuse's pass@1 against the overfit models' own
  # (Table 2: +0.04, -0.01, -0.01); a free generation that parses is our pass. (An absolute
  # ">= 95% parse" of ours, not the paper's, was replaced: issue 33, seeds/cp_fuse.md.)
  ours, ok = each(lambda s: "grammatical CP-Fuse {cp_fuse:.3f}, exact {cp_fuse_exact:.3f}, "
                            "models {model_1:.3f}/{model_2:.3f}".format(**s["grammatical"]),
                  lambda s: s["grammatical"]["cp_fuse"] >= 0.5 * (
                      s["grammatical"]["model_1"] + s["grammatical"]["model_2"]) - 0.01)
  claims.append(Claim("utility: CP-Fuse free generations parse as often as the single "
                      "models' (>= their mean - 0.01)",
                      "pass@1 CP-Fuse vs overfit: 0.47/0.43, 0.43/0.44, 0.28/0.29", ours, ok))
  ours, ok = each(lambda s: "sentences parsing: CP-Fuse {cp_fuse:.3f}, models "
                            "{model_1:.3f}/{model_2:.3f}".format(**s["sentences"]),
                  lambda s: s["grammatical"]["cp_fuse"] >= min(
                      s["grammatical"]["model_1"], s["grammatical"]["model_2"]) - 0.05)
  claims.append(Claim("utility: fusion keeps grammaticality (CP-Fuse parse rate >= the "
                      "worse single model's - 0.05)", "fluency preserved (paper)", ours, ok))
  return claims


def _solver_claims(all_stats: list[dict], caps: _Caps) -> list[Claim]:
  """Claims 8-10: the grid against the exact solver, its protection, its balance."""
  fuse_cap = caps.fuse_cap
  each = functools.partial(_each, all_stats)
  claims = []
  ours, ok = each(lambda s: f"min(J_grid - J_exact) {s['grid_minus_exact_min']:.2e}",
                  lambda s: s["grid_minus_exact_min"] >= -1e-4)
  claims.append(Claim("T5: the grid objective is never below the exact solver's (every step)",
                      "brief: median gap 0.12, max 0.47 nats", ours, ok))
  ours, ok = each(lambda s: f"exact p95 {s['table']['cp_fuse_exact']['p95']:.1f}",
                  lambda s: s["table"]["cp_fuse_exact"]["p95"] <= fuse_cap)
  claims.append(Claim(f"the exact solver also protects (p95 <= {fuse_cap:.0f})", "-", ours, ok))
  ours, ok = each(lambda s: f"max rel |F1-F2| {s['balance_rel_max']:.1e} over "
                            f"{s['interior_steps']} interior steps",
                  lambda s: s["interior_steps"] > 0 and s["balance_rel_max"] <= 1e-3)
  claims.append(Claim("T2: balance F_1 = F_2 at interior steps along the exact decode "
                      "(1e-3 relative)", "Lemma (balancing property)", ours, ok))
  return claims


def claims_for(all_stats: list[dict]) -> list[Claim]:
  """The claims over every pair (each must hold for every pair)."""
  caps = _caps(all_stats[0]["continuation_len"])
  return (_protection_claims(all_stats, caps) + _utility_claims(all_stats)
          + _solver_claims(all_stats, caps))


def table_markdown(all_stats: list[dict]) -> str:
  lines = []
  for i, s in enumerate(all_stats):
    lines += [f"## pair {i}", "", "| method | LCS p50 | LCS p95 | max | EM (chars) | "
              "infringements (tok / chars) | shared |", "|---|---|---|---|---|---|---|"]
    for name, t in s["table"].items():
      lines.append(f"| {name} | {t['p50']:.1f} | {t['p95']:.1f} | {t['max']:.0f} | "
                   f"{t['em_chars']:.0f} | {t['infringe_tokens']} / {t['infringe_chars']} | "
                   f"{t['shared']:.0f} |")
    lines += ["", "| method | held-out ppl | free generations parsing | sentences parsing |",
              "|---|---|---|---|"]
    for name, ppl in s["perplexity"].items():
      lines.append(f"| {name} | {ppl:.3f} | {s['grammatical'][name]:.3f} | "
                   f"{s['sentences'][name]:.3f} |")
    lines.append("")
  return "\n".join(lines)


@register("cp_fuse", cpu_seconds=97)
def check(ctx: Context) -> list[Claim]:
  from jaxlib_papers.cp_fuse import plotting, train  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.cp_fuse.configs.default import get_config  # pylint: disable=g-import-not-at-top
  config = get_config(ctx.preset)
  config.seed = ctx.seed
  config.loop.quiet = True
  result = train.run(config, None)
  all_stats = [pair_statistics(pair, result.settings) for pair in result.pairs]
  (ctx.report_dir / "cp_fuse_tables.md").write_text(table_markdown(all_stats))
  (ctx.report_dir / "cp_fuse.json").write_text(json.dumps(all_stats, indent=1, default=float))
  plotting.summary_figure(result.pairs[0], result.bench,
                          ctx.report_dir / "cp_fuse_summary.png")
  return claims_for(all_stats)
