r"""Unbalanced FM speed: one coupling + FM step, ours and torchcfm's exact / unbalanced samplers.

  pip install -e .[bench]     # torch (a CPU build), torchcfm, POT
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/unbalanced_fm.py --official_dir=torchcfm
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/unbalanced_fm.py        # ours only

What is timed, at the same sizes on both sides: a batch of B apo and B holo conformers of
the ligand toy (flattened, D = 24), a coupling of the B x B batch, and one Adam step of
conditional FM on a velocity MLP (width ``--hidden``, 3 hidden layers, time as an input).

* ours: one training step of ``kernel.make_kernel`` (the paper's cutoff rule on Kabsch
  RMSD costs from the seed's pool: fixed-shape pairs and weights, the masked CFM loss, jit
  compiled), for 1 member and for ``--members`` members vmapped in one program; and the
  KL-relaxed unbalanced plan of ott-jax (``couplings.uot_plan``) on the same B x B batch.
* torchcfm (``--official_dir=torchcfm``: the installed package, or a checkout's folder put
  on ``sys.path``): ``OTPlanSampler(method="exact")`` and ``OTPlanSampler(method=
  "unbalanced", reg, reg_m, normalize_cost=True)`` (POT on the host, squared Euclidean
  costs, divided by their maximum for the unbalanced plan: torchcfm has no
  Kabsch cost and no cutoff rule), ``ConditionalFlowMatcher(sigma=0)``'s
  ``sample_location_and_conditional_flow`` and one torch Adam step on the same MLP shape.

* the energy (``energy``): value and gradient of the flat-bottom energy at the dock stage's
  shapes, ours against autodiff of the plain form, alternating (no official counterpart:
  the official relaxation loss runs on RDKit bounds this toy does not have).

All the steps run round-robin in one process (ours, 1 member; ours, ``--members``; the UOT
plan; torchcfm exact; torchcfm unbalanced), ``--repeats`` rounds after a warm-up call each
(which compiles ours); each row gives the median (min-max) milliseconds per step and
member, our one-member step's per-round ratio against each torchcfm step, and ours against
this machine's own peaks measured after the rounds (``core.timing``: the roofline's bound
and the fraction of its peak reached, from XLA's counts). torchcfm's steps are not the same
algorithm (squared Euclidean costs, no cutoff rule): the ratio says what a user of that
library pays per step at these sizes, not that one implementation of one method beats
another. Without ``--official_dir`` or without torch / torchcfm installed only ours is
timed, and the script says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxlib_papers.core import timing  # noqa: E402
from jaxlib_papers.unbalanced_fm import couplings, geometry, kernel, problems  # noqa: E402


def ours(batch: int, hidden: int, members: int) -> dict[str, tuple]:
  """{row: (call, XLA's counts of one call, units per call)}: our cutoff + FM step (1 and
  ``members`` members; per member) and the UOT plan on the same batch, compiled here."""
  rng = np.random.default_rng(0)
  ligand = problems.make_ligand()
  apo = problems.sample_apo(rng, ligand, 4 * batch)[None]
  holo = problems.sample_holo(rng, ligand, 4 * batch)[0][None]
  cost = jax.jit(jax.vmap(geometry.pairwise_rmsd))(apo, holo)
  pools = kernel.DockPools(jnp.asarray(apo.reshape(1, -1, 24)),
                           jnp.asarray(holo.reshape(1, -1, 24)), cost)
  net = kernel.NetSettings(24, hidden, 3, 32)
  out = {}
  for r in (1, members):
    member_args = (np.full(r, 1.0, np.float32), np.zeros(r, np.float32), np.zeros(r, np.int32))
    k = kernel.make_kernel(net, kernel.dock_draw(pools, batch), None, member_args, 1,
                           np.arange(r))
    holder = {"state": k.init(jax.random.key(0))}
    step = jax.jit(k.train_step).lower(holder["state"], None).compile()
    counts = timing.program_cost(k.train_step, holder["state"], None, compiled=step)

    def call(step=step, holder=holder):
      holder["state"], metrics = step(holder["state"], None)
      jax.block_until_ready(metrics["loss"])

    out[f"ours cutoff + FM step, {r} member(s)"] = (call, counts, r)
  sub = cost[0, :batch, :batch]
  plan = lambda c: couplings.uot_plan(c, 0.05, 0.9, 0.9)
  uot = jax.jit(plan).lower(sub).compile()
  out["ours ott-jax UOT plan (B x B)"] = (
      lambda: jax.block_until_ready(uot(sub)),
      timing.program_cost(plan, sub, compiled=uot), 1)
  return out


def energy(batch: int, members: int, repeats: int) -> dict[str, float]:
  """Seconds per value-and-gradient of the flat-bottom energy on ``members // 2 x batch``
  docked-like conformers (the energy-on half of the dock stage's members): ours
  (``geometry.flat_bottom_energy``, whose pocket term has its gradient written out,
  ``geometry.pocket_hinge``) against autodiff of the same energy written plainly (the
  ``[..., A, P, 3]`` differences; the form before 2026-12-04), alternating, medians."""
  rng = np.random.default_rng(0)
  ligand = problems.make_ligand()
  x = problems.sample_apo(rng, ligand, (members // 2) * batch)
  x = jnp.asarray(x.reshape(members // 2, batch, -1, 3), jnp.float32)
  pocket, geo = jnp.asarray(ligand.pocket, jnp.float32), ligand.geometry

  def plain(z):
    pair = geometry.flat_bottom_energy(z, pocket[:0], geo)     # no pocket points: pairs only
    diff = z[..., :, None, :] - pocket
    near = jax.nn.relu(geo.pocket_min - geometry.safe_sqrt((diff ** 2).sum(-1)))
    return (pair + near.sum((-1, -2))).sum()

  fns = {"autodiff of the plain form": jax.jit(jax.value_and_grad(plain)),
         "ours (pocket_hinge)": jax.jit(jax.value_and_grad(
             lambda z: geometry.flat_bottom_energy(z, pocket, geo).sum()))}
  values = {name: fn(x) for name, fn in fns.items()}
  (v0, g0), (v1, g1) = values.values()
  print(f"energy: value {float(v0):.6g} vs {float(v1):.6g}, gradient max |diff| "
        f"{float(jnp.abs(g0 - g1).max()):.2e} (max |grad| {float(jnp.abs(g0).max()):.3g})")
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(x))
      times[name].append(time.perf_counter() - start)
  out = {f"energy value + grad, {name}": statistics.median(t) for name, t in times.items()}
  ratio = [a / b for a, b in zip(*times.values())]
  print(f"energy: plain / ours per alternating round, median {statistics.median(ratio):.1f}x "
        f"(min {min(ratio):.1f}x, max {max(ratio):.1f}x)")
  return out


def official(batch: int, hidden: int) -> dict[str, object]:
  """{row: call} of torchcfm's exact and unbalanced samplers + one FM Adam step."""
  import torch  # pylint: disable=g-import-not-at-top
  from torchcfm.conditional_flow_matching import ConditionalFlowMatcher  # pylint: disable=g-import-not-at-top
  from torchcfm.optimal_transport import OTPlanSampler  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  ligand = problems.make_ligand()
  x0 = torch.tensor(problems.sample_apo(rng, ligand, batch).reshape(batch, -1))
  x1 = torch.tensor(problems.sample_holo(rng, ligand, batch)[0].reshape(batch, -1))
  layers = [torch.nn.Linear(25, hidden), torch.nn.SiLU()]
  for _ in range(2):
    layers += [torch.nn.Linear(hidden, hidden), torch.nn.SiLU()]
  model = torch.nn.Sequential(*layers, torch.nn.Linear(hidden, 24))
  opt = torch.optim.Adam(model.parameters(), 1e-3)
  matcher = ConditionalFlowMatcher(sigma=0.0)
  out = {}
  for name, sampler in (("exact", OTPlanSampler(method="exact")),
                        # normalize_cost: on the raw squared distances (max ~300 here)
                        # reg = 0.05 underflows POT's unbalanced Sinkhorn at its first
                        # iteration and torchcfm falls back to the uniform plan, so the step
                        # timed would not be a plan at all
                        ("unbalanced", OTPlanSampler(method="unbalanced", reg=0.05,
                                                     reg_m=1.0, normalize_cost=True))):
    def call(sampler=sampler):
      a, b = sampler.sample_plan(x0, x1)
      t, xt, ut = matcher.sample_location_and_conditional_flow(a, b)
      loss = ((model(torch.cat([xt, t[:, None]], -1)) - ut) ** 2).mean()
      opt.zero_grad()
      loss.backward()
      opt.step()

    out[name] = call
  return out


def alternate(calls: dict[str, object], repeats: int) -> dict[str, list[float]]:
  """Seconds of each call, round-robin over ``repeats`` rounds after one warm-up each."""
  for call in calls.values():
    call()
  seconds = {name: [] for name in calls}
  for _ in range(repeats):
    for name, call in calls.items():
      start = time.perf_counter()
      call()
      seconds[name].append(time.perf_counter() - start)
  return seconds


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--official_dir", default=None)
  parser.add_argument("--batch", type=int, default=128)
  parser.add_argument("--hidden", type=int, default=256)   # the cpu preset's docking MLP
  parser.add_argument("--members", type=int, default=12)
  parser.add_argument("--repeats", type=int, default=20)
  args = parser.parse_args()
  mine = ours(args.batch, args.hidden, args.members)
  theirs, torch = {}, None
  if args.official_dir:
    if os.path.isdir(args.official_dir):
      sys.path.insert(0, os.path.abspath(args.official_dir))
    try:
      theirs = official(args.batch, args.hidden)
      import torch  # pylint: disable=g-import-not-at-top
    except ImportError as error:
      print(f"official side not timed (torch / torchcfm not importable: {error})")
  else:
    print("official side not timed (no --official_dir): ours only")
  print(timing.machine_line(torch))
  one = next(iter(mine))
  seconds = alternate({**{name: c for name, (c, _, _) in mine.items()},
                       **{f"torchcfm {name}": c for name, c in theirs.items()}}, args.repeats)
  energy_rows = energy(args.batch, args.members, args.repeats)
  peaks = timing.machine_peaks()  # after the timed rows, in this process
  print(f"{peaks.what}\nB = {args.batch}, D = 24, MLP width {args.hidden} x 3, "
        f"{jax.default_backend()}; ms per step (per member), medians (min-max) over "
        f"{args.repeats} alternating rounds")
  print("| ours | ours ms | torchcfm (same round) | torchcfm ms | torchcfm / ours | "
        "ours of peak |\n|---|---|---|---|---|---|")
  for name, (_, counts, units) in mine.items():
    ms = [1e3 * t / units for t in seconds[name]]
    where = timing.limit_text(counts, statistics.median(seconds[name]), peaks)
    pairs = [(f"torchcfm {n}", seconds[f"torchcfm {n}"]) for n in theirs] if name == one else []
    for other, theirs_s in pairs or [("-", None)]:
      row = timing.side_by_side_row(name, "", ms, [1e3 * t for t in theirs_s or []], 0.0)
      label = "-" if theirs_s is None else f"{other} sampler + FM step"
      print(f"| {name} | {row[2]} | {label} | {row[4]} | {row[5]} | {where} |")
  for name, value in energy_rows.items():
    print(f"  {name:48s} {1e3 * value:8.2f} ms / call (all conformers)")


if __name__ == "__main__":
  main()
