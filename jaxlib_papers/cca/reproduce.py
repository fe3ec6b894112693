"""CCA reproduction check (``launch.reproduce``): the exact toy and tokenised digits.

Claims (the issue's), all at the preset's size:

1. exact toy (float64): CCA's optimum is the CFG target at lambda = Z^beta (TV < 1e-6),
   lambda = 0 returns the reference, the best-fit guidance scale rises with lambda; the
   minibatch kernel (sampled pairs) reaches the exact optimum;
2. digits, one CCA epoch: guidance-free accuracy >= base + 5 points and closes >= half of
   the gap to the best CFG accuracy; Fréchet distance no worse than the base model's;
3. the lambda sweep trades diversity for fidelity like the CFG scale (|Spearman| >= 0.8 for
   both accuracy and diversity), and at matched diversity CCA is at most 3 points below the
   CFG curve;
4. lambda = 0 keeps accuracy within 2 points of the base; CFG on top of CCA still helps.

Digit metrics are means over ``num_seeds`` seeds (one program), spread = std over seeds.
"""

from __future__ import annotations

import json

import numpy as np
import scipy.stats

from jaxlib_papers.core.reproduce import Claim, Context, register

PAPER_TOY = "theory (paper Sec. 3): optimum = p^s with s = 1/beta; brief's BFGS table"
PAPER_MAIN = ("LlamaGen-L w/o guidance FID 19.00 / IS 64.7 -> CCA 3.43 / 288.2 (Table 3); "
              "LlamaGen-3B 9.38/112.9 -> 2.69/276.8, CFG 2.18/263.3 (Table 2)")
PAPER_SWEEP = ("Fig. 6-7: lambda sweeps an FID-IS curve like the CFG scale's, CCA on or near "
               "the CFG curve")
PAPER_CFG = "Fig. 8: CFG still improves CCA models (needs the unconditional rows)"


def toy_claims(sampled_tv: float | None = None) -> tuple[list[Claim], str]:
  """Claim 1 from the exact float64 toy (and the sampled-minibatch TV when given)."""
  from jaxlib_papers.cca import toy  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.core.precision import enable_x64  # pylint: disable=g-import-not-at-top
  cond, prior = toy.TOY_CONDITIONALS, toy.TOY_PRIOR
  lambdas = (0.5, 1.0, 1.2, 2.0, 4.0, 8.0, 20.0)
  with enable_x64():
    tvs = {}
    for beta in (1.0, 0.5):
      z = float(toy.partition(cond, prior, 1.0 / beta)[0])
      tvs[beta] = toy.total_variation(toy.exact_optimum(beta, z ** beta),
                                      toy.cfg_target(cond, prior, 1.0 / beta))
    tv_zero = toy.total_variation(toy.exact_optimum(1.0, 0.0), cond)
    optima = {lam: toy.exact_optimum(1.0, lam) for lam in lambdas}
  scales = [toy.best_fit_scale(optima[lam]) for lam in lambdas]
  rows = ["| beta | lambda | optimum p(x|c=0) | best-fit s |", "|---|---|---|---|"]
  rows += [f"| 1 | {lam:g} | {np.round(optima[lam][0], 4).tolist()} | {s:.3f} |"
           for lam, s in zip(lambdas, scales)]
  claims = [
      Claim("toy: optimum = CFG target at lambda = Z^beta, TV < 1e-6 (beta 1 and 0.5)",
            PAPER_TOY, f"TV {tvs[1.0]:.1e} (beta 1), {tvs[0.5]:.1e} (beta 0.5)",
            bool(max(tvs.values()) < 1e-6)),
      Claim("toy: lambda = 0 returns the reference (TV < 1e-6)", "optimum = p_phi",
            f"TV {tv_zero:.1e}", bool(tv_zero < 1e-6)),
      Claim("toy: best-fit guidance scale rises monotonically with lambda",
            "brief: lambda 1 -> s ~ 0.8, lambda 4 -> s ~ 4.5",
            ", ".join(f"λ={lam:g}: s={s:.2f}" for lam, s in zip(lambdas, scales)),
            bool(np.all(np.diff(scales) > 0))),
  ]
  if sampled_tv is not None:
    claims.append(Claim("toy: the minibatch kernel (sampled pairs) reaches the s=1 target, "
                        "TV < 0.02", "-", f"TV {sampled_tv:.4f}", bool(sampled_tv < 0.02)))
  return claims, "\n".join(rows)


def sampled_toy_tv(num_steps: int = 600) -> float:
  """TV between the s = 1 CFG target and the toy trained by the kernel on sampled pairs."""
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.cca import kernel, toy  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.core import distributed, train_loop  # pylint: disable=g-import-not-at-top
  cond, prior = toy.TOY_CONDITIONALS, toy.TOY_PRIOR
  refs = jax.tree.map(lambda x: np.asarray(x, np.float32)[None], toy.tabular_params(cond))
  settings = kernel.AlignSettings(loss="cca", beta=1.0, uncond_ratio=0.0, negatives="shuffle",
                                  null_label=2)
  optimizer = optax.adam(optax.cosine_decay_schedule(0.05, num_steps, 0.02))
  tk = kernel.make_align_kernel(toy.tabular_logprob, optimizer, settings, refs, [1.2])
  joint = (prior[:, None] * cond).reshape(-1)

  def data(step):
    pair = np.random.default_rng(step).choice(joint.size, size=1024, p=joint)
    labels, outcome = np.divmod(pair, 4)
    return {"tokens": toy.OUTCOMES[outcome][:, None], "labels": labels[:, None].astype(np.int32)}

  config = ml_collections.ConfigDict({"seed": 0, "loop": {"num_steps": num_steps,
                                                          "quiet": True}})
  mesh = distributed.make_mesh(devices=jax.devices()[:1])
  state = train_loop.run(tk, data, config, None, mesh=mesh).state
  learned = np.asarray(toy.tabular_conditionals(jax.tree.map(lambda x: x[0], state.params)))
  return toy.total_variation(learned, toy.cfg_target(cond, prior, 1.0))


def _stats(result) -> dict[str, dict[str, float]]:
  """{setting: its row of ``result.summary``} (means and ``_std`` over seeds)."""
  return {row["setting"]: row for row in result.summary}


def _fmt(stats, name, key, digits=1):
  row = stats[name]
  return f"{row[key]:.{digits}f} ± {row[key + '_std']:.{digits}f}"


def _headline_claims(result, stats) -> list[Claim]:
  """Claim 2: one CCA epoch against the base model and the best CFG row."""
  main = f"cca lambda={result.main_lambda:g}"
  cfg_names = ["base"] + [k for k in stats if k.startswith("cfg ")]
  acc = {k: stats[k]["accuracy"] for k in stats}
  base, best_cfg = acc["base"], max(acc[k] for k in cfg_names)
  best_cfg_name = max(cfg_names, key=lambda k: acc[k])
  gain, gap = acc[main] - base, best_cfg - base
  return [
      Claim(f"digits: guidance-free CCA ({main}, {result.align_steps} steps = one epoch) "
            "accuracy >= base + 5 points and closes >= half the gap to the best CFG accuracy",
            PAPER_MAIN,
            f"base {_fmt(stats, 'base', 'accuracy')}, CCA {_fmt(stats, main, 'accuracy')}, "
            f"best CFG ({best_cfg_name}) {_fmt(stats, best_cfg_name, 'accuracy')}; gain "
            f"{gain:+.1f}, gap closed {gain / gap if gap > 0 else float('nan'):.2f}",
            bool(gain >= 5.0 and gap > 0 and gain >= 0.5 * gap)),
      Claim("digits: CCA Fréchet distance no worse than the base model's", PAPER_MAIN,
            f"base {_fmt(stats, 'base', 'fd', 2)}, CCA {_fmt(stats, main, 'fd', 2)}",
            bool(stats[main]["fd"] <= stats["base"]["fd"]),
            why="setup (cat. 3): on raster tokens any sharpening (CFG too) costs FD; on "
                "VQ tokens (configs/vq.py) CFG lowers FD on every seed and CCA lowers the "
                "mean FD, 5 of 6 seeds (seeds/cca.md)"),
  ]


def _sweep_claims(result, stats) -> list[Claim]:
  """Claim 3: the lambda sweep against the CFG scale (rank correlations, matched diversity)."""
  lambdas = result.lambdas
  cfg = [k for k in stats if k.startswith("cfg ")]
  scales = [0.0] + [float(k.split("=")[1]) for k in cfg]
  cfg_names = ["base"] + cfg
  acc = {k: stats[k]["accuracy"] for k in stats}
  div = {k: stats[k]["diversity"] for k in stats}
  cca_names = [f"cca lambda={lam:g}" for lam in lambdas]
  rho = {
      "cca acc": scipy.stats.spearmanr(lambdas, [acc[k] for k in cca_names])[0],
      "cca div": scipy.stats.spearmanr(lambdas, [div[k] for k in cca_names])[0],
      "cfg acc": scipy.stats.spearmanr(scales, [acc[k] for k in cfg_names])[0],
      "cfg div": scipy.stats.spearmanr(scales, [div[k] for k in cfg_names])[0],
  }
  # Four points give rho in steps of 0.2, and one adjacent swap (exactly 0.8) comes out of
  # scipy as 0.7999999999999999: round so the threshold means what it says.
  rho = {k: round(float(v), 9) for k, v in rho.items()}
  monotone = all(rho[k] >= 0.8 for k in ("cca acc", "cfg acc")) and all(
      rho[k] <= -0.8 for k in ("cca div", "cfg div"))
  # Matched diversity: interpolate the CFG curve's accuracy at each CCA point's diversity.
  order = np.argsort([div[k] for k in cfg_names])
  cfg_div = np.array([div[cfg_names[i]] for i in order])
  cfg_acc = np.array([acc[cfg_names[i]] for i in order])
  gaps = []
  for name in cca_names[1:] if lambdas[0] == 0 else cca_names:
    if cfg_div[0] <= div[name] <= cfg_div[-1]:
      gaps.append((name, acc[name] - float(np.interp(div[name], cfg_div, cfg_acc))))
  return [
      Claim("digits: lambda trades diversity for accuracy like the CFG scale (Spearman of "
            "accuracy >= 0.8, of diversity <= -0.8, both knobs)", PAPER_SWEEP,
            ", ".join(f"{k} {v:+.2f}" for k, v in rho.items()), bool(monotone),
            why="lambda = 300 is guidance beyond the CFG grid (the FD and precision of CFG at "
                "s = 10-20, where CFG's accuracy turns down too); lambda 0 -> 30, the CFG "
                "grid's range, is monotone (seeds/cca.md)"),
      Claim("digits: at matched diversity CCA is at most 3 points below the CFG curve",
            PAPER_SWEEP, "; ".join(f"{n.split()[-1]}: {g:+.1f}" for n, g in gaps) or
            "no CCA point inside the CFG curve's diversity range",
            bool(gaps) and all(g >= -3.0 for _, g in gaps)),
  ]


def _side_claims(result, stats) -> list[Claim]:
  """Claim 4: lambda = 0 stays at the base; CFG on top of CCA still helps."""
  main = f"cca lambda={result.main_lambda:g}"
  claims = []
  zero = "cca lambda=0"
  if zero in stats:
    claims.append(Claim(
        "digits: lambda = 0 keeps accuracy within 2 points of the base", "-",
        f"base {_fmt(stats, 'base', 'accuracy')}, lambda=0 {_fmt(stats, zero, 'accuracy')}",
        bool(abs(stats[zero]["accuracy"] - stats["base"]["accuracy"]) <= 2.0)))
  both = [k for k in stats if k.startswith("cca+cfg")]
  if both:
    claims.append(Claim(
        f"digits: CFG on top of CCA still helps ({both[0]} vs {main})", PAPER_CFG,
        f"CCA {_fmt(stats, main, 'accuracy')}, CCA+CFG {_fmt(stats, both[0], 'accuracy')}",
        bool(stats[both[0]]["accuracy"] > stats[main]["accuracy"])))
  return claims


def digit_claims(result) -> list[Claim]:
  """Claims 2-4 from a :class:`train.Result` (means over seeds from its ``summary``)."""
  stats = _stats(result)
  return (_headline_claims(result, stats) + _sweep_claims(result, stats)
          + _side_claims(result, stats))


@register("cca", cpu_seconds=101)
def check(ctx: Context) -> list[Claim]:
  from jaxlib_papers.cca import train  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.cca.configs.default import get_config  # pylint: disable=g-import-not-at-top
  sampled = sampled_toy_tv(600 if ctx.preset != "smoke" else 100)
  claims, toy_table = toy_claims(sampled)
  config = get_config(ctx.preset)
  config.seed = ctx.seed
  config.loop.quiet = True
  config.align_loop.quiet = True
  result = train.run(config, None)
  claims += digit_claims(result)
  table = train.summary_table(result)
  (ctx.report_dir / "cca_tables.md").write_text(
      f"## exact toy\n\n{toy_table}\n\n## digits ({config.num_seeds} seeds, mean ± std)\n\n"
      f"{table}\n\nSVC test accuracy on real digits: {result.classifier_accuracy:.3f}; "
      f"pretrained test NLL (nats/token): {np.round(result.test_nll, 4).tolist()}; "
      f"timing (s): {json.dumps({k: round(v, 1) for k, v in result.timing.items()})}\n")
  summary = {name: {k: v.tolist() for k, v in m.items()} for name, m in result.metrics.items()}
  (ctx.report_dir / "cca.json").write_text(json.dumps(summary, indent=1))
  from jaxlib_papers.cca import plotting  # pylint: disable=g-import-not-at-top
  plotting.figure(result, ctx.report_dir / "cca_samples.png")
  return claims
