"""OCM reproduction check (``launch.reproduce``): Gaussian mixtures with an exact-covariance row.

At ``cpu``: four mixtures fixed before any result was seen (``MIXTURES``: the 8-mode 2-D
ring, 8 modes in 16-D, 4 anisotropic modes in 8-D, 12 modes in 4-D), K in {5, 10, 20},
the official likelihood protocol (decoder variance tilde_beta(1, 2) for every method).
Claims, each per mixture:

1. NELBO ordering beta~ > beta > Analytic-DPM > OCM at every K (the paper's CIFAR-10
   ordering);
2. OCM within 0.05 nats/dim of the exact (oracle) diagonal covariance at every K;
3. sample MMD of OCM <= 0.75 x that of beta~ at K = 10;
4. the OCM head's error against sigma^2 diag H (h-space) below Analytic-DPM's at every
   reported t (the smallest skip steps of K = 20, 10, 5 and t = 500).

Beside them, per mixture, one report-only row (no threshold; issue 33): the NELBO with the
eps network's own Jacobian diagonal as the covariance (method "jacobian", h_theta = -sigma_t
diag d eps_theta / d x_t, exact by d jvps, clipped like every method to c in [0, max_var]),
which is what OCM's unbiased estimator converges to on that network: the gap between it and
"exact" is the network's, not the head's.

At ``smoke`` only the ring runs, at smoke size (the claims need not hold there).
"""

from __future__ import annotations

import json

from jaxlib_papers.core import figures
from jaxlib_papers.core.reproduce import Claim, Context, register

PAPER_NLL = "CIFAR-10 NLL K=10 (bits/dim): OCM 5.32 < NPR 5.40 < Analytic 5.47"
PAPER_FID = "CIFAR-10 FID K=10 (cosine, DDPM): OCM 14.32, SN 16.33, NPR 19.94, Analytic 22.94"
PROTOTYPE = "8-mode prototype K=10: beta 0.80, Analytic 0.63, OCM 0.56, exact 0.55 nats/dim"


def _table(result, dataset: str) -> str:
  """The markdown tables of one data set's :class:`train.Result`."""
  lines = [f"## {dataset}", "", "NELBO (nats/dim), DDPM sampler:", "",
           "| method | " + " | ".join(f"K={k}" for k in result.nelbo) + " |",
           "|---|" + "---|" * len(result.nelbo)]
  for name in result.methods:
    lines.append(f"| {name} | " + " | ".join(
        f"{result.nelbo[k][name]:.4f}" for k in result.nelbo) + " |")
  if result.terms:
    ks = list(result.terms)
    lines += ["", "Last transition t_1 -> 1 (nats/dim; the decoder is shared):", "",
              "| method | " + " | ".join(f"K={k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name in result.methods:
      lines.append(f"| {name} | " + " | ".join(
          f"{result.terms[k][name][-2]:.4f}" for k in ks) + " |")
  for field, title in (("mmd", "MMD^2, DDPM (eta=1)"), ("mmd_ddim", "MMD^2, DDIM (eta=0)")):
    table = getattr(result, field)
    if not table:
      continue
    lines += ["", f"{title}:", "", "| method | " + " | ".join(
        f"K={k}" for k in table) + " |", "|---|" + "---|" * len(table)]
    for name in result.methods:
      lines.append(f"| {name} | " + " | ".join(
          f"{table[k][name]:.2e}" for k in table) + " |")
  if result.head_error:
    ts = list(result.head_error)
    lines += ["", "Head error E||h - sigma^2 diag H||^2 / d:", "",
              "| method | " + " | ".join(f"t={t}" for t in ts) + " |", "|---|" + "---|" * len(ts)]
    for name in result.head_error[ts[0]]:
      lines.append(f"| {name} | " + " | ".join(
          f"{result.head_error[t][name]:.2e}" for t in ts) + " |")
  if result.jacobian_nelbo:
    ks, names = list(result.jacobian_nelbo), list(next(iter(result.jacobian_nelbo.values())))
    lines += ["", f"Report-only diagnostic (issue 33): NELBO with the eps network's own "
              f"Jacobian diagonal as h (jacobian; what OCM's estimator converges to), beside "
              f"OCM and exact on the first {result.jacobian_points} held-out points, same "
              f"draws:", "", "| method | " + " | ".join(f"K={k}" for k in ks) + " |",
              "|---|" + "---|" * len(ks)]
    for name in names:
      lines.append(f"| {name} | " + " | ".join(
          f"{result.jacobian_nelbo[k][name]:.4f}" for k in ks) + " |")
  return "\n".join(lines) + "\n"


# The check's mixtures, fixed before any result was seen (name, config.data overrides).
MIXTURES = (
    ("ring2d", dict(name="ring2d", num_modes=8, radius=0.8, std=0.1)),
    ("gmm16", dict(name="gmm", num_modes=8, dim=16, radius=0.8, mixture_seed=0,
                   std_range=(0.05, 0.2))),
    ("gmm8a", dict(name="gmm", num_modes=4, dim=8, radius=0.7, mixture_seed=101,
                   std_range=(0.02, 0.3))),
    ("gmm4b", dict(name="gmm", num_modes=12, dim=4, radius=0.8, mixture_seed=202,
                   std_range=(0.03, 0.15))),
)
EXACT_GAP = 0.05   # nats/dim
JACOBIAN_ROW = ("reported: {dataset}: NELBO with the eps network's own Jacobian diagonal as "
                "the covariance (what OCM's estimator converges to), beside OCM and exact, "
                "at K in {ks}")


def _exact_gap_why(result, ks) -> str:
  """Why OCM misses the exact row where it does, read off the "jacobian" diagnostic: at the
  K of the largest gap, is what OCM's estimator converges to (the network's own Jacobian)
  further from exact than the trained head is (the network's accuracy), or not (the head's)?"""
  table = getattr(result, "jacobian_nelbo", None) or {}
  k = max(ks, key=lambda k: result.nelbo[k]["ocm"] - result.nelbo[k]["exact"])
  row = table.get(k, {})
  if not {"jacobian", "ocm", "exact"} <= set(row):
    return ""
  limit = row["jacobian"] - row["exact"]
  if limit > row["ocm"] - row["exact"]:
    return (f"the network's Jacobian (what OCM converges to) is {limit:+.2f} from exact at "
            f"K={k}: the backbone's accuracy, not the head (seeds/ocm.md)")
  return (f"the head's: the network's own Jacobian is within {limit:+.3f} of exact at K={k} "
          "(seeds/ocm.md)")


def _jacobian_row(result, dataset: str) -> Claim:
  """The report-only row of the "jacobian" diagnostic (a measurement: always 'holds')."""
  table = result.jacobian_nelbo
  parts = []
  for k, nel in table.items():
    parts.append(f"K={k}: jacobian {nel['jacobian']:.4f}, OCM {nel['ocm']:.4f}"
                 + (f", exact {nel['exact']:.4f} (jacobian - exact "
                    f"{nel['jacobian'] - nel['exact']:+.4f}, OCM - exact "
                    f"{nel['ocm'] - nel['exact']:+.4f})" if "exact" in nel else ""))
  return Claim(claim=JACOBIAN_ROW.format(dataset=dataset, ks=list(table)),
               paper="- (a diagnostic beyond the paper; issue 33)",
               ours=f"on the first {result.jacobian_points} held-out points, same draws: "
                    + "; ".join(parts), holds=True)


def claims_for(result, dataset: str) -> list[Claim]:
  """The claims from one data set's :class:`train.Result` (every K of the NELBO)."""
  ks = list(result.nelbo)
  order = ("beta_tilde", "beta", "analytic", "ocm")
  parts, ordered = [], True
  for k in ks:
    nel = result.nelbo[k]
    ordered &= all(nel[a] > nel[b] for a, b in zip(order, order[1:]))
    parts.append(f"K={k}: " + ", ".join(f"{n} {nel[n]:.3f}" for n in order))
  out = [Claim(
      claim=f"{dataset}: NELBO beta~ > beta > Analytic > OCM at K in {ks}",
      paper=f"{PAPER_NLL}; {PROTOTYPE}", ours="; ".join(parts), holds=bool(ordered))]
  if "exact" in result.nelbo[ks[0]]:
    parts, holds = [], True
    for k in ks:
      nel = result.nelbo[k]
      gap = nel["ocm"] - nel["exact"]
      holds &= gap <= EXACT_GAP
      parts.append(f"K={k}: OCM {nel['ocm']:.4f}, exact {nel['exact']:.4f} (gap {gap:+.4f})")
    out.append(Claim(
        claim=f"{dataset}: OCM NELBO within {EXACT_GAP} nats/dim of the exact covariance "
              f"at K in {ks}",
        paper=PROTOTYPE, ours="; ".join(parts), holds=bool(holds),
        why=_exact_gap_why(result, ks)))
  if result.mmd:
    k10 = 10 if 10 in result.mmd else next(iter(result.mmd))
    mmd = result.mmd[k10]
    ratio = mmd["ocm"] / max(mmd["beta_tilde"], 1e-12)
    out.append(Claim(
        claim=f"{dataset}: K={k10} sample MMD^2 of OCM <= 0.75 x beta~",
        paper=PAPER_FID, ours=f"OCM {mmd['ocm']:.2e}, beta~ {mmd['beta_tilde']:.2e} "
                              f"(ratio {ratio:.2f})",
        holds=bool(ratio <= 0.75)))
  if result.head_error:
    parts, holds = [], True
    for t, errs in result.head_error.items():
      parts.append(f"t={t}: OCM {errs['ocm']:.2e} vs Analytic {errs['analytic']:.2e}")
      holds &= errs["ocm"] < errs["analytic"]
    ts = list(result.head_error)
    out.append(Claim(
        claim=f"{dataset}: OCM head error in h-space below Analytic-DPM's at t in {ts}",
        paper="OCM's diagonal beats Analytic-DPM's scalar (paper Table 1 ordering)",
        ours="; ".join(parts), holds=bool(holds)))
  if result.jacobian_nelbo:
    out.append(_jacobian_row(result, dataset))
  return out


def mixture_config(preset: str, seed: int, overrides: dict):
  from jaxlib_papers.ocm.configs.default import get_config  # pylint: disable=g-import-not-at-top
  config = get_config(preset)
  for key, value in overrides.items():
    config.data[key] = value
  config.seed = seed
  # The report-only diagnostic (issue 33), listed before "exact" so the tables read
  # OCM, its limit on this network, the oracle.
  methods = [m for m in config.eval.methods if m != "jacobian"]
  at = methods.index("exact") if "exact" in methods else len(methods)
  config.eval.methods = tuple(methods[:at] + ["jacobian"] + methods[at:])
  config.loop.quiet = True
  config.head_loop.quiet = True
  return config


@register("ocm", cpu_seconds=631)
def check(ctx: Context) -> list[Claim]:
  from jaxlib_papers.ocm import plotting, train  # pylint: disable=g-import-not-at-top
  mixtures = MIXTURES[:1] if ctx.preset == "smoke" else MIXTURES
  claims: list[Claim] = []
  report = []
  for i, (dataset, overrides) in enumerate(mixtures):
    config = mixture_config(ctx.preset, ctx.seed, overrides)
    result = train.run(config, None, verbose=False)
    ctx.progress(f"{dataset}: trained and evaluated (mixture {i + 1}/{len(mixtures)})")
    claims += claims_for(result, dataset)
    report.append(_table(result, dataset))
    fig = plotting.samples_figure(result, dataset)
    if fig is not None:
      figures.save(fig, ctx.report_dir / f"ocm_{dataset}_samples.png")
    summary = {k: getattr(result, k)
               for k in ("nelbo", "terms", "mmd", "mmd_ddim", "head_error",
                         "jacobian_nelbo")}
    (ctx.report_dir / f"ocm_{dataset}.json").write_text(json.dumps(
        summary, indent=1, sort_keys=True, default=float))
  (ctx.report_dir / "ocm_tables.md").write_text("\n".join(report))
  return claims
