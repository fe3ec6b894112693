"""Identifiability reproduction check (``launch.reproduce --only=identifiability``).

Programs at ``cpu`` (seeds and variants of equal shape in one program):

* ``sup_d5``: supervised, d = 5, |C| = 100, kappa in {10, 50} (Table 3 default and the
  kappa trend);
* ``diet_d5``: DIET, N = 1000, normalised and unnormalised head rows (Table 2 default);
* ``sup_d10``: supervised, d = 10 (the d trend);
* ``sup_c10``: supervised, |C| = 10 (the |C| trend);
* ``sprites``: the DisLib stand-in (Table 4).

Every vMF program trains at the paper's batch (1024); at ``cpu`` ``diet_d5`` and
``sup_d10`` (its encoder twice as wide, as the paper's widths grow with d) run 4000 Adam
steps, the others 2000.

At ``smoke`` only ``sup_d5`` and ``sprites`` run, at smoke size (claims need not hold).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from jaxlib_papers.core.reproduce import Claim, Context, register

PAPER_T3 = "Table 3 (supervised, R^2 z): d=5 99.8, d=10 97.2, |C|=10 97.5, kappa=50 65.5"
PAPER_T2 = "Table 2 (DIET, d=5, N=1e3): R2a z 99.0, R2a W->v 99.9; R2o z 98.6, MAEo 0.01"
PAPER_T4 = "Table 4 dSprites r (pixels/MLP): scale .62/.98, posX,posY .92/.97"


def programs(preset: str) -> dict[str, Any]:
  """The configs of the check, by name."""
  from jaxlib_papers.identifiability.configs.default import get_config  # pylint: disable=g-import-not-at-top

  def vmf(**changes):
    config = get_config(preset)
    for dotted, value in changes.items():
      group, key = dotted.split("__")
      config[group][key] = value
    return config

  out = {"sup_d5": vmf(dgp__kappas=(10.0, 50.0))}
  if preset != "smoke":
    out["diet_d5"] = vmf(objective__kind="diet", objective__normalize_head=(False, True))
    out["sup_d10"] = vmf(dgp__dim=10)
    out["sup_c10"] = vmf(dgp__num_classes=10)
  if preset == "cpu":
    # DIET, whose 1000 head rows each see 1/1000 of a batch, gets twice the steps (its
    # learning curve had not flattened at 2000). d = 10 gets the encoder scaled with d, as
    # the paper's [10d, 50d x 4, 10d] is (twice the d = 5 widths), and twice the steps:
    # with the d = 5 encoder at 2000 steps R^2 stayed at 0.74 on three seeds
    # (seeds/identifiability.md, issue 33).
    out["diet_d5"].loop.num_steps *= 2
    out["sup_d10"].model.hidden = tuple(2 * w for w in out["sup_d10"].model.hidden)
    out["sup_d10"].loop.num_steps *= 2
  out["sprites"] = get_config(f"sprites,{preset}")
  return out


def _entry(result: Any, kappa: float | None = None, norm: bool | None = None) -> dict:
  for entry in result.summary:
    if (kappa is None or entry["kappa"] == kappa) and (
        norm is None or entry["normalize_head"] == norm):
      return entry
  raise KeyError(f"no variant kappa={kappa}, normalize_head={norm}")


def _ms(entry: dict, key: str) -> str:
  return f"{entry[key]:.3f} ± {entry[key + '_std']:.3f}"


def _supervised_claims(result: Any) -> list[Claim]:
  e = _entry(result, 10.0)
  gap_x = e["r2_z"] - e["r2_x"]
  gap_u = e["r2_z"] - e["r2_z_untrained"]
  return [
      Claim(claim="supervised d=5 |C|=100 kappa=10: held-out R^2(z) >= 0.95, >= 0.2 above "
                  "raw x and >= 0.3 above the untrained encoder",
            paper=PAPER_T3,
            ours=(f"R^2 {_ms(e, 'r2_z')} (min {e['r2_z_min']:.3f}, {e['seeds']} seeds); raw "
                  f"x {_ms(e, 'r2_x')}; untrained {_ms(e, 'r2_z_untrained')}"),
            holds=bool(e["r2_z"] >= 0.95 and gap_x >= 0.2 and gap_u >= 0.3)),
      Claim(claim="sanity: model CE on fresh samples >= Bayes CE - 0.02 (the floor), "
                  "supervised kappa=10",
            paper="-", ours=f"model {_ms(e, 'model_ce')}, Bayes {_ms(e, 'bayes_ce')}",
            holds=bool(e["model_ce"] >= e["bayes_ce"] - 0.02))]


def _diet_claims(result: Any) -> list[Claim]:
  e, n = _entry(result, norm=False), _entry(result, norm=True)
  return [
      Claim(claim="DIET d=5 N=1000: R^2(z) >= 0.93, R^2(W->v) >= 0.97, same-class head-row "
                  "cosine >= 0.95",
            paper=PAPER_T2,
            ours=(f"R^2 z {_ms(e, 'r2_z')}, W->v {_ms(e, 'r2_head')}, cosine "
                  f"{_ms(e, 'head_cosine')}"),
            holds=bool(e["r2_z"] >= 0.93 and e["r2_head"] >= 0.97
                       and e["head_cosine"] >= 0.95)),
      Claim(claim="DIET normalised W: R^2(z) without intercept >= 0.93, singular-value MAE "
                  "to 1/kappa <= 0.05",
            paper=PAPER_T2,
            ours=(f"R^2 {_ms(n, 'r2_z_no_intercept')}, MAE {_ms(n, 'sv_mae_z')}; W->v (no "
                  f"intercept) {_ms(n, 'r2_head_no_intercept')}"),
            holds=bool(n["r2_z_no_intercept"] >= 0.93 and n["sv_mae_z"] <= 0.05))]


def _trend_claims(results: dict[str, Any]) -> list[Claim]:
  claims = []
  d5 = _entry(results["sup_d5"], 10.0)
  if "sup_d10" in results:
    d10 = _entry(results["sup_d10"])
    claims.append(Claim(
        claim="trend d: R^2(z) falls from d=5 to d=10 and stays >= 0.85 at d=10",
        paper=PAPER_T3, ours=f"d=5 {_ms(d5, 'r2_z')}, d=10 {_ms(d10, 'r2_z')}",
        holds=bool(d10["r2_z"] < d5["r2_z"] and d10["r2_z"] >= 0.85),
        why="budget (cat. 2): 4000 steps of the paper's 50,000; check seeds 0-2 gave 0.870 / "
            "0.853 / 0.863 at this size, 0.74 with the d=5 encoder (seeds/identifiability.md)"))
  if "sup_c10" in results:
    c10 = _entry(results["sup_c10"])
    claims.append(Claim(
        claim="trend |C|: R^2(z) lower at |C|=10 than at |C|=100",
        paper=PAPER_T3, ours=f"|C|=100 {_ms(d5, 'r2_z')}, |C|=10 {_ms(c10, 'r2_z')}",
        holds=bool(c10["r2_z"] < d5["r2_z"])))
  k50 = _entry(results["sup_d5"], 50.0)
  claims.append(Claim(
      claim="trend kappa: R^2(z) lower at kappa=50 than at kappa=10 (paired seeds)",
      paper=PAPER_T3, ours=f"kappa=10 {_ms(d5, 'r2_z')}, kappa=50 {_ms(k50, 'r2_z')}",
      holds=bool(k50["r2_z"] < d5["r2_z"])))
  return claims


def _sprites_claim(result: Any) -> Claim:
  r, factors = result.r, list(result.factors)
  tr, px = np.asarray(r["trained"]).mean(0), np.asarray(r["pixels"]).mean(0)
  un = np.asarray(r["untrained"]).mean(0)
  idx = [factors.index(f) for f in ("scale", "pos_x", "pos_y")]
  return Claim(
      claim="sprites: trained encoder decodes scale, pos_x, pos_y with r >= 0.9 and beats "
            "raw pixels on scale",
      paper=PAPER_T4,
      ours="; ".join(f"{f}: trained {tr[i]:.3f} / pixels {px[i]:.3f} / untrained "
                     f"{un[i]:.3f}" for f, i in zip(("scale", "pos_x", "pos_y"), idx)),
      holds=bool(np.all(tr[idx] >= 0.9) and tr[idx[0]] > px[idx[0]]))


def claims_for(results: dict[str, Any]) -> list[Claim]:
  """Claims from the programs' results (``train.VmfResult`` / ``SpritesResult``, those that
  ran)."""
  claims = []
  if "sup_d5" in results:
    claims += _supervised_claims(results["sup_d5"])
  if "diet_d5" in results:
    claims += _diet_claims(results["diet_d5"])
  if "sup_d5" in results:
    claims += _trend_claims(results)
  if "sprites" in results:
    claims.append(_sprites_claim(results["sprites"]))
  return claims


def _vmf_results(results: dict[str, Any]) -> dict[str, Any]:
  return {k: v for k, v in results.items() if hasattr(v, "summary")}


def _table(results: dict[str, Any]) -> str:
  lines = ["| program | kappa | norm W | R2 z | R2 z (no int.) | R2 raw x | R2 untrained "
           "| R2 W->v | MAE sv | head cos | CE model | CE Bayes |", "|---" * 12 + "|"]
  for name, res in _vmf_results(results).items():
    for e in res.summary:
      lines.append(
          f"| {name} | {e['kappa']:g} | {e['normalize_head']} | {_ms(e, 'r2_z')} | "
          f"{_ms(e, 'r2_z_no_intercept')} | {_ms(e, 'r2_x')} | {_ms(e, 'r2_z_untrained')} | "
          f"{_ms(e, 'r2_head')} | {_ms(e, 'sv_mae_z')} | "
          f"{_ms(e, 'head_cosine') if 'head_cosine' in e else '-'} | "
          f"{_ms(e, 'model_ce')} | {_ms(e, 'bayes_ce')} |")
  if "sprites" in results:
    r = results["sprites"].r
    lines += ["", "| sprites r | " + " | ".join(results["sprites"].factors) + " |",
              "|---" * 5 + "|"]
    for key in ("pixels", "untrained", "trained"):
      v = np.asarray(r[key])
      lines.append(f"| {key} | " + " | ".join(
          f"{m:.3f} ± {s:.3f}" for m, s in zip(v.mean(0), v.std(0))) + " |")
  return "\n".join(lines) + "\n"


@register("identifiability", cpu_seconds=515)
def check(ctx: Context) -> list[Claim]:
  import time  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.core import figures  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.identifiability import plotting, train  # pylint: disable=g-import-not-at-top
  results, timings = {}, {}
  runs = programs(ctx.preset)
  for i, (name, config) in enumerate(runs.items()):
    config.seed = ctx.seed
    config.loop.quiet = True
    start = time.perf_counter()
    results[name] = train.run(config, None)
    timings[name] = time.perf_counter() - start
    ctx.progress(f"{name}: trained and evaluated (program {i + 1}/{len(runs)})")
  claims = claims_for(results)
  (ctx.report_dir / "identifiability_tables.md").write_text(_table(results))
  figures.save(plotting.summary_figure(_vmf_results(results), results.get("sprites")),
               ctx.report_dir / "identifiability.png", dpi=80)
  dump = {name: {"summary": getattr(res, "summary", None), "timings": timings[name],
                 "r": {k: np.asarray(v).tolist() for k, v in res.r.items()}
                 if hasattr(res, "r") else None}
          for name, res in results.items()}
  (ctx.report_dir / "identifiability.json").write_text(
      json.dumps(dump, indent=1, default=float))
  return claims
