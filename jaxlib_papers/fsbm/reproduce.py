"""FSBM reproduction check (registered with ``launch.reproduce``).

At ``cpu``: S-tunnel (tau = 100) and V-neck (tau = 10) with the official aligned
keypoints (80 used as feedback, 20 held out), each against the tau = 0
(unguided, DSBM-like) baseline trained by the same compiled program. Claims (issue 3):
FSBM collision rate <= 0.10, both W2 <= 0.5; S-tunnel's tau = 0 collision rate >= 0.95
(the official code: 1.00), V-neck's below FSBM's (its neck is centred on the marginals).
Beside them the GSBM-style baseline (tau = 0 with GSBM's known obstacle cost, and on
S-tunnel its congestion cost; V-neck's entropy cost only where ``gsbm_entropy`` is set,
``full``) should avoid the obstacles too.
Opinion depolarisation (tau = 10, generated non-polarised keypoints: no official ones
exist; D = 50 at ``cpu``, the paper's D = 100 at ``full`` and ``smoke``: at ``cpu``
size the D = 100 unguided model did not reach p1, issue 33 in seeds/fsbm.md): the
polarising reference dynamics polarise the population,
FSBM's paths stay less polarised than tau = 0's (max over time of the
polarisation index, <= 0.75x), and both reach p1 (terminal MMD^2 within 10x of
the two-sample floor).
At ``smoke`` (tests): a few alternations, same claims reported (not expected to hold).
"""

from __future__ import annotations

import time

import numpy as np

from jaxlib_papers.core import reproduce
from jaxlib_papers.fsbm import train
from jaxlib_papers.fsbm.configs import default

TASKS = (("stunnel", 100.0), ("vneck", 10.0))


def held_out_tracking_error(paths: np.ndarray, held_out: np.ndarray) -> float:
  """Mean distance between each held-out keypoint trajectory and the generated
  trajectory that starts closest to it (paths: [S, n, 2] on linspace(0, 1, S))."""
  if len(held_out) == 0:
    return float("nan")
  num_t = paths.shape[0]
  kp_idx = np.round(np.linspace(0, held_out.shape[1] - 1, num_t)).astype(int)
  errs = []
  for kp in held_out:
    i = np.argmin(np.sum((paths[0] - kp[0]) ** 2, axis=-1))
    errs.append(np.mean(np.linalg.norm(paths[:, i] - kp[kp_idx], axis=-1)))
  return float(np.mean(errs))


def task_run(task: str, tau: float, preset: str, seed: int, keypoints_path: str | None):
  """FSBM (tau), tau = 0 and, on tasks with obstacles, the GSBM-style baseline (tau = 0
  with GSBM's known obstacle cost in every R-step): three runs of one compiled program.

  Returns (config, [fsbm, tau0(, gsbm)] ``train.RunResult`` rows, seconds for all runs);
  a diverged run has its ``error`` set.
  """
  from jaxlib_papers.fsbm import tasks  # pylint: disable=g-import-not-at-top
  overrides = {"seed": seed}
  if keypoints_path:  # GSBM does not use them, but shares the grid and split
    overrides.update(keypoints_path=keypoints_path, num_feedback=80, **{"csoc.S": 100})
  config = default.task_config(task, preset, **overrides)
  taus, weights = (tau, 0.0), (0.0, 0.0)
  if task in tasks.OBSTACLE_WEIGHT:
    taus, weights = taus + (0.0,), weights + (tasks.OBSTACLE_WEIGHT[task],)
  start = time.perf_counter()
  result = train.run(config, taus=taus, obstacle_weights=weights, verbose=preset != "smoke",
                     errors="record")
  return config, result.runs, time.perf_counter() - start


def plot(ctx, task, fsbm, base):
  from jaxlib_papers.core import figures  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.fsbm import plotting  # pylint: disable=g-import-not-at-top
  figures.save(plotting.trajectories_figure(task, fsbm, base),
               ctx.report_dir / f"fsbm_{task}.png", dpi=100)


# XLA:CPU (jax 0.10.2) hands reductions to its YNNPACK library fusions by default; on the
# crowd tasks' CondSOC iteration (elementwise work on [256, 4, 100, 2] arrays ending in
# per-pair reductions) its own emitters are faster (one S-tunnel alternation, round 1:
# FSBM 31 -> 20 s, tau = 0 17 -> 11 s, GSBM-style 24 -> 21 s), while on the opinion task
# (D = 100, [512, 2, 50, 100]) the library is faster (tau = 10 alternation 60 -> 69 s
# without it), so only the crowd parts turn it off (seeds/fsbm.md).
_NO_YNN_FUSIONS = "--xla_cpu_experimental_ynn_fusion_type="


@reproduce.register("fsbm", parts=("stunnel", "vneck", "opinion"),
                    cpu_seconds={"stunnel": 177, "vneck": 173, "opinion": 136},
                    xla_flags={"stunnel": _NO_YNN_FUSIONS, "vneck": _NO_YNN_FUSIONS})
def check(ctx) -> list[reproduce.Claim]:
  claims = []
  for task, tau in TASKS:
    if not ctx.runs(task):
      continue
    kp_file = ctx.data_file(f"fsbm/kp_traj_{task}.pt")
    data = ctx.data_label(f"fsbm/kp_traj_{task}.pt")
    config, (fsbm, base, gsbm), seconds = task_run(task, tau, ctx.preset, ctx.seed,
                                                   str(kp_file) if kp_file else None)
    if fsbm.error or base.error:
      # A diverged run is a result, not a crash of the whole report: record it and go on.
      claims.append(reproduce.Claim(
          claim=f"{task}: FSBM (tau={tau:g}) and tau=0 train to the end (finite losses)",
          paper="-", ours="diverged: " + "; ".join(r.error for r in (fsbm, base)
                                                    if r.error),
          holds=False, data=data))
      continue
    plot(ctx, task, fsbm, base)
    ho_f = held_out_tracking_error(fsbm.evaluation.paths, fsbm.held_out_keypoints)
    ho_b = held_out_tracking_error(base.evaluation.paths, base.held_out_keypoints)
    ev_f, ev_b = fsbm.evaluation, base.evaluation
    setting = (f"{config.loop.num_steps} alternations, B {config.batch_size}, "
               f"{config.csoc.num_iters} CondSOC iters, {config.match.steps} M-steps; "
               f"{seconds:.0f}s for the FSBM, tau=0 and GSBM-style runs")
    claims += [
        reproduce.Claim(
            claim=f"{task}: FSBM (tau={tau:g}) collision rate <= 0.10 [{setting}]",
            paper="official code, reduced S-tunnel: 0.07 -> 0.03" if task == "stunnel"
            else "-",
            ours=f"{ev_f.collision_rate:.3f}", holds=ev_f.collision_rate <= 0.10,
            data=data),
        baseline_claim(task, ev_f, ev_b, data),
        reproduce.Claim(
            claim=f"{task}: W2(generated, target) <= 0.5 for FSBM and tau=0",
            paper="official code, reduced S-tunnel: both <= 0.5" if task == "stunnel"
            else "-",
            ours=f"FSBM {ev_f.w2:.3f}, tau=0 {ev_b.w2:.3f}",
            holds=ev_f.w2 <= 0.5 and ev_b.w2 <= 0.5, data=data),
        reproduce.Claim(
            claim=f"{task}: held-out keypoints tracked better with feedback "
                  "(mean distance to the nearest-start generated path)",
            paper="-", ours=f"FSBM {ho_f:.2f}, tau=0 {ho_b:.2f}",
            holds=bool(ho_f < ho_b), data=data),
        gsbm_claim(task, fsbm, gsbm, data, entropy=bool(config.gsbm_entropy)),
    ]
  if ctx.runs("opinion"):
    claims += opinion_claims(ctx)
  return claims


def baseline_claim(task, ev_f, ev_b, data) -> reproduce.Claim:
  """S-tunnel: the unguided baseline crosses the obstacles (the official code: 1.00). V-neck:
  its opening is centred on the marginals, so unguided paths mostly pass the neck and a
  ">= 0.95" bar (carried over from S-tunnel; not the paper's) cannot hold; the paper's
  comparison there is FSBM's collision rate against the unguided baseline's."""
  if task == "stunnel":
    return reproduce.Claim(
        claim=f"{task}: tau=0 baseline collision rate >= 0.95",
        paper="official code, reduced S-tunnel: 1.00",
        ours=f"{ev_b.collision_rate:.3f}", holds=ev_b.collision_rate >= 0.95, data=data)
  return reproduce.Claim(
      claim=f"{task}: feedback lowers the collision rate below the tau=0 baseline's",
      paper="FSBM avoids the obstacles where the unguided bridge does not (figures)",
      ours=f"FSBM {ev_f.collision_rate:.3f}, tau=0 {ev_b.collision_rate:.3f}",
      holds=bool(ev_f.collision_rate < ev_b.collision_rate), data=data)


def gsbm_claim(task, fsbm, gsbm, data, entropy: bool = False) -> reproduce.Claim:
  costs = "obstacle 1500 + congestion 50" if task == "stunnel" else "obstacle 3000"
  if task == "vneck" and entropy:
    costs += " + entropy 8"
  claim = (f"{task}: GSBM-style baseline (tau=0, told the obstacles: {costs}) avoids the "
           "obstacles (collision rate <= 0.10, W2 <= 0.5); FSBM, not told the obstacles, "
           "beside it")
  if gsbm.error:
    return reproduce.Claim(claim=claim, paper="-", ours=f"diverged: {gsbm.error}",
                           holds=False, data=data)
  ev_g, ev_f = gsbm.evaluation, fsbm.evaluation
  paper = "GSBM/FSBM papers: both avoid the obstacles (figures, full schedule)"
  if task == "stunnel":
    paper += "; official GSBM code at the cpu schedule: 0.42, W2 0.42 (seeds/fsbm.md)"
  return reproduce.Claim(
      claim=claim, paper=paper,
      ours=f"GSBM-style collision {ev_g.collision_rate:.3f}, W2 {ev_g.w2:.3f}; "
           f"FSBM {ev_f.collision_rate:.3f}, W2 {ev_f.w2:.3f}",
      holds=ev_g.collision_rate <= 0.10 and ev_g.w2 <= 0.5, data=data,
      why=("budget (cat. 2): GSBM itself grazes the tips at the cpu schedule (official code "
           "0.42 at 5 epochs; ours 0.22 at 20 alternations, 0.28 with 4x pairs: "
           "seeds/fsbm.md)") if task == "stunnel" else "")


def opinion_claims(ctx) -> list[reproduce.Claim]:
  """Opinion depolarisation: FSBM (tau = 10) vs tau = 0 vs the reference dynamics."""
  import jax  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.core import metrics  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.fsbm import tasks  # pylint: disable=g-import-not-at-top
  data = "generated"  # no official opinion keypoints exist
  config, (fsbm, base), seconds = task_run("opinion", 10.0, ctx.preset, ctx.seed, None)
  if fsbm.error or base.error:
    return [reproduce.Claim(
        claim="opinion: FSBM (tau=10) and tau=0 train to the end (finite losses)",
        paper="-", ours="diverged: " + "; ".join(r.error for r in (fsbm, base)
                                                  if r.error),
        holds=False, data=data)]
  ev_f, ev_b = fsbm.evaluation, base.evaluation
  n = len(ev_f.paths[-1])
  p0, p1 = tasks.marginals("opinion", int(config.dim))
  rng = np.random.default_rng(ctx.seed + 123)
  ref_pol = train.reference_polarisation(config, p0.sample(rng, n), jax.random.key(ctx.seed))
  floor = float(metrics.mmd_rbf(p1.sample(rng, n), p1.sample(rng, n)))
  plot_opinion(ctx, fsbm, base, ref_pol)
  setting = (f"D {config.dim}, {config.loop.num_steps} alternations, B {config.batch_size}, "
             f"{config.csoc.num_iters} CondSOC iters, {config.match.steps} M-steps; "
             f"{seconds:.0f}s for both runs")
  pol = lambda e: f"max {e.polarisation_max:.3f}, t=1 {e.polarisation:.3f}"
  ho_f = held_out_tracking_error(ev_f.paths, fsbm.held_out_keypoints)
  ho_b = held_out_tracking_error(ev_b.paths, base.held_out_keypoints)
  return [
      reproduce.Claim(
          claim="opinion: the polarising reference dynamics polarise p0 "
                "(max polarisation index >= 2x that of p0)",
          paper="DeepGSB/GSBM/FSBM premise (figures)",
          ours=f"p0 {ref_pol[0]:.3f}, max {max(ref_pol):.3f}",
          holds=max(ref_pol) >= 2.0 * ref_pol[0], data=data),
      reproduce.Claim(
          claim=f"opinion: FSBM paths less polarised than tau=0 (max over t of the "
                f"polarisation index <= 0.75x) [{setting}]",
          paper="FSBM paper: feedback depolarises (figure, no number)",
          ours=f"FSBM {pol(ev_f)}; tau=0 {pol(ev_b)}; target {ev_f.target_polarisation:.3f}",
          holds=ev_f.polarisation_max <= 0.75 * ev_b.polarisation_max, data=data,
          why="setup (cat. 3): the unguided model is never polarised: FSBM's steps cancel "
              "the reference drift (tau=0 is the drift-free model to 2-11%, up to 30 "
              "alternations), so both maxima are the shared t=0 value (seeds/fsbm.md)"),
      reproduce.Claim(
          claim="opinion: FSBM and tau=0 reach p1 (terminal MMD^2 <= 10x that of two "
                "independent p1 samples of the same size)",
          paper="-",
          ours=f"FSBM {ev_f.mmd:.4f}, tau=0 {ev_b.mmd:.4f}, two p1 samples {floor:.4f}",
          holds=max(ev_f.mmd, ev_b.mmd) <= 10.0 * floor, data=data,
          why="budget (cat. 2): at D = 100 the backward net cannot contract p1 to p0 at this "
              "training length; it holds at the cpu preset's D = 50 (seeds/fsbm.md)"),
      reproduce.Claim(
          claim="opinion: held-out keypoints tracked better with feedback",
          paper="-", ours=f"FSBM {ho_f:.2f}, tau=0 {ho_b:.2f}",
          holds=bool(ho_f < ho_b), data=data,
          why="budget (cat. 2): a tie at the cpu R-step's 100 CondSOC iterations; at the "
              "official 700 FSBM tracks better on seeds 0-2 by 1.7-4.3% (seeds/fsbm.md)"),
  ]


def plot_opinion(ctx, fsbm, base, ref_pol):
  from jaxlib_papers.core import figures  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.fsbm import plotting  # pylint: disable=g-import-not-at-top
  figures.save(plotting.opinion_figure(fsbm, base, ref_pol),
               ctx.report_dir / "fsbm_opinion.png", dpi=100)
