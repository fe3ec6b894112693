r"""Official GSBM (facebookresearch/generalized-schrodinger-bridge-matching) on S-tunnel at
our ``cpu`` schedule, driven without Lightning/Hydra: the reference for the FSBM check's
GSBM-style row (``seeds/fsbm.md``). Not a speed benchmark.

  git clone https://github.com/facebookresearch/generalized-schrodinger-bridge-matching /tmp/GSBM
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
      python benchmarks/fsbm_gsbm_official.py --official_dir /tmp/GSBM --out gsbm.json \
      --epochs 5 --B 256 --steps_per_epoch 3000 --nitr 1000

Needs torch, omegaconf and POT (pytorch_lightning, hydra, ipdb, torchvision and geomloss
get empty stand-ins). Per epoch it prints and stores: the forward EMA model's collision
rate over all 1001 saved steps of 1000 p0 samples (the FSBM check's metric), its W2 to
1000 fresh p1 samples, and the fitted Gaussian paths' own collision rates.

What is official (imported from the checkout and called as is):
  gsbm.dataset.get_dist_boundary / Gaussian samplers, SplineDataset, PairDataset
  gsbm.pl_model.GSBMLitModule: __init__ (build_net = EMA(Unbatch(ToyVectorField)),
    build_state_cost = CrowdNavStateCost('stunnel', obs 1500 + cgst 50), ZeroBaseDrift),
    val_dataloader, validation_step (compute_coupling -> sample -> sde.sdeint, nfe 1000;
    EndPointGaussianPath + gaussian_path.build_loss_fn + gaussian_path.fit),
    validation_epoch_end (SplineDataset with expand_factor=epd_fct, direction init),
    train_dataloader, training_step (sample_gpath + match_loss.bm_loss),
    configure_optimizers (AdamW + CosineAnnealingLR per step), training_epoch_end
    (direction flip), sample (sdeint), EMA.update_ema / EMA.train (EMA swap in eval).
What is replaced (Lightning plumbing only): the Trainer's fit loop (sanity validation,
  epoch loop, validation at the last batch of every epoch under torch.no_grad with the
  module in eval mode, training_epoch_end afterwards, dataloader reloads), the automatic
  optimisation step (zero_grad, backward, optimizer.step, then net.update_ema() as the
  official optimizer_step override, then scheduler.step), self.log / self.print plumbing,
  and the plotting hooks (log_coupling / log_gpath only capture their inputs).
"""
import argparse
import copy
import importlib
import json
import os
import pathlib
import random
import sys
import tempfile
import time
import types

import numpy as np
from official_stand_ins import stand_in  # this folder, first on sys.path


def in_obstacle(xy):
  """xy: (..., 2) numpy -> bool (...): inside either S-tunnel ellipse (hard boundary)."""
  x, y = xy[..., 0], xy[..., 1]
  return (20 * (x - 5) ** 2 + (y - 6) ** 2 < 90) | (20 * (x + 5) ** 2 + (y + 6) ** 2 < 90)


def w2(x, y):
  import ot
  x = np.asarray(x, dtype=np.float64)
  y = np.asarray(y, dtype=np.float64)
  M = ot.dist(x, y)  # squared Euclidean
  a = np.full(len(x), 1.0 / len(x))
  b = np.full(len(y), 1.0 / len(y))
  return float(np.sqrt(ot.emd2(a, b, M, numItermax=10_000_000)))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--official_dir", default="/tmp/GSBM")
  ap.add_argument("--epochs", type=int, default=5)
  ap.add_argument("--B", type=int, default=256)
  ap.add_argument("--steps_per_epoch", type=int, default=3000)
  ap.add_argument("--nitr", type=int, default=1000)
  ap.add_argument("--n_eval", type=int, default=1000)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--out", required=True, help="results .json")
  args = ap.parse_args()
  args.out = os.path.abspath(args.out)  # the run changes directory

  import torch
  torch.set_num_threads(1)
  from omegaconf import OmegaConf

  official = pathlib.Path(args.official_dir)
  # --- stand-ins for packages not installed (never used on the paths driven here) ---
  stand_in("ipdb", set_trace=lambda *a, **k: None)
  stand_in("torchvision.utils")
  stand_in("torchvision.transforms")
  # Forced: the loop here drives GSBMLitModule itself, on a plain nn.Module base.
  stand_in("pytorch_lightning", force=True, LightningModule=torch.nn.Module)
  import ot
  import ot.sliced  # noqa: F401  (before the geomloss stand-in: POT probes geomloss)
  stand_in("geomloss", SamplesLoss=None)  # evaluator (eval_coupling=false: unused)
  pkg = types.ModuleType("gsbm")
  pkg.__path__ = [str(official / "gsbm")]
  sys.modules["gsbm"] = pkg
  sys.path.insert(0, str(official))
  pl_model = importlib.import_module("gsbm.pl_model")
  dataset_lib = importlib.import_module("gsbm.dataset")
  evaluator_lib = importlib.import_module("gsbm.evaluator")

  # --- config: configs/train.yaml + configs/experiment/stunnel.yaml (hydra keys dropped) ---
  base = OmegaConf.load(official / "configs" / "train.yaml")
  for k in ("defaults", "hydra"):
    base.pop(k, None)
  exp = OmegaConf.load(official / "configs" / "experiment" / "stunnel.yaml")
  cfg = OmegaConf.merge(base, exp)
  steps = args.steps_per_epoch
  assert (steps * cfg.optim.batch_size) % args.B == 0
  cfg.csoc.B = args.B
  cfg.csoc.epd_fct = steps * cfg.optim.batch_size // args.B  # B*epd_fct/64 = steps
  cfg.csoc.nitr = args.nitr
  cfg.optim.num_workers = 0  # plumbing: no worker processes (one core budget)
  print(OmegaConf.to_yaml(cfg), flush=True)

  # The evaluator (CrowdNavEvaluator) is only used when eval_coupling=true (false here) and
  # its constructor writes data/stunnel.pt: use the official no-op evaluator instead.
  pl_model.build_evaluator = lambda cfg: evaluator_lib.DumpEvaluator()

  captured = {}

  class Driven(pl_model.GSBMLitModule):
    """GSBMLitModule with Lightning's attributes supplied by this driver."""

    def log(self, *a, **k):
      pass

    def localize(self, p):
      # official: g.manual_seed(g.seed() + rank) -- a nondeterministic seed; here a seed
      # drawn from the (seeded) global torch RNG so that the run is reproducible.
      g = torch.Generator()
      g.manual_seed(int(torch.randint(0, 2**62, (1,)).item()) + self.global_rank)
      local_p = copy.deepcopy(p)
      local_p.set_generator(g)
      return local_p

    def log_coupling(self, t, xs, direction, fn, log_steps=5):
      captured["coupling"] = (t.detach().cpu().clone(), xs.detach().cpu().clone())

    def log_gpath(self, result, fn):
      captured["fit"] = result

    def log_IW(self, result, fn):
      pass

  # --- seed_everything(0) as train.py ---
  random.seed(args.seed)
  np.random.seed(args.seed)
  torch.manual_seed(args.seed)

  cwd = os.getcwd()
  workdir = tempfile.mkdtemp(prefix="gsbm_official_")
  os.chdir(workdir)  # GSBMLitModule.__init__ makes ./figs
  p0, p1, p0_val, p1_val = dataset_lib.get_dist_boundary(cfg)
  model = Driven(cfg, p0, p1, p0_val, p1_val)
  # (train.py's log_boundary only plots; skipped)
  model.trainer = types.SimpleNamespace(is_global_zero=True, num_training_batches=steps)
  model.current_epoch = 0
  model.global_rank = 0
  opt_cfg = model.configure_optimizers()
  optimizer = opt_cfg["optimizer"]
  scheduler = opt_cfg["lr_scheduler"]["scheduler"]

  results = {"config": OmegaConf.to_container(cfg, resolve=True), "fits": [], "epochs": []}

  # --- evaluation helpers (own RNG streams; do not disturb training RNG) ---
  def fit_metrics(result, eval_seed):
    gp = result["gpath"]
    with torch.no_grad(), torch.random.fork_rng():
      torch.manual_seed(eval_seed)
      t = torch.linspace(0.001, 0.999, cfg.csoc.S)  # the fit's own time grid
      mean = gp.mean(t)  # (B, S, D)
      xs = gp.sample_xt(t, N=cfg.csoc.N)  # (B, N, S, D): marginal samples, iid per t
      knots = gp.mean.xt  # (B, T_mean, D)
    mean_in = in_obstacle(mean.numpy())
    xs_in = in_obstacle(xs.numpy())
    knots_in = in_obstacle(knots.numpy())
    losses = result["losses"]
    return {
        "mean_path_collision": float(mean_in.any(-1).mean()),
        "mean_knots_collision": float(knots_in.any(-1).mean()),
        "samples_path_collision": float(xs_in.any(-1).mean()),  # any of S iid-per-t points
        "samples_point_frac": float(xs_in.mean()),
        "fit_loss_first": float(losses[0]),
        "fit_loss_last": float(np.mean(losses[-10:])),
    }

  def model_metrics(direction, eval_seed, use_ema=True):
    if use_ema:
      model.eval()  # EMA.train(False): copy shadow params into the nets (as in validation)
    try:
      with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(eval_seed)
        n = args.n_eval
        if direction == "fwd":
          xinit, target = p0(n), p1(n)
        else:
          xinit, target = p1(n), p0(n)
        out = model.sample(xinit, log_steps=cfg.nfe + 1, direction=direction)
        xs = out["xs"].numpy()  # (n, nfe+1, 2), time increasing
    finally:
      if use_ema:
        model.train()
    inside = in_obstacle(xs)
    idx15 = np.linspace(0, xs.shape[1] - 1, cfg.csoc.T_mean).astype(int)
    term = xs[:, -1] if direction == "fwd" else xs[:, 0]
    return {
        "collision": float(inside.any(-1).mean()),
        "collision_15steps": float(inside[:, idx15].any(-1).mean()),
        "W2": w2(term, target.numpy()),
        "terminal_mean": term.mean(0).tolist(),
    }

  def coupling_collision():
    if "coupling" not in captured:
      return None
    _, xs = captured["coupling"]
    return float(in_obstacle(xs.numpy()).any(-1).mean())

  # --- validation (Lightning: module.eval(), torch.no_grad, validation_step per batch,
  #     validation_epoch_end, module.train()) ---
  def run_validation(loader):
    model.eval()
    outputs = []
    with torch.no_grad():
      for batch_idx, batch in enumerate(loader):
        outputs.append(model.validation_step(batch, batch_idx))
      model.validation_epoch_end(outputs)
    model.train()

  model.train()
  fit_seed = 10_000
  # sanity validation (num_sanity_val_steps=-1): direction None -> independent coupling,
  # straight-line mean, fit with "fwd"; validation_epoch_end sets direction = "fwd".
  t0 = time.time()
  val_loader = model.val_dataloader()
  val_loader_epoch = 0
  run_validation(val_loader)
  t_init = time.time() - t0
  fm = fit_metrics(captured["fit"], fit_seed)
  fm.update({"after": "init", "coupling_collision": coupling_collision(), "seconds": t_init})
  results["fits"].append(fm)
  print(f"[init] fit (independent coupling, straight mean): {json.dumps(fm)}", flush=True)

  global_step = 0
  for epoch in range(args.epochs):
    model.current_epoch = epoch
    direction = model.direction
    t_ep = time.time()
    # reload_dataloaders_every_n_epochs=1: train loader rebuilt from the latest train_data
    train_loader = model.train_dataloader()
    assert len(train_loader) == steps, len(train_loader)
    n_skip = 0
    losses = []
    t_train = time.time()
    for batch_idx, batch in enumerate(train_loader):
      # Lightning automatic optimisation: zero_grad, training_step, backward, step
      optimizer.zero_grad()
      out = model.training_step(batch, batch_idx)
      if out is not None:
        out["loss"].backward()
        optimizer.step()
        losses.append(out["loss"].item())
      else:
        n_skip += 1
      model.net.update_ema()  # official optimizer_step override
      scheduler.step()  # interval "step"
      global_step += 1
    t_train = time.time() - t_train
    # validation at the last batch of the epoch; the val loader is reloaded only when
    # current_epoch - last_reload_epoch >= 1 (so epoch 0 reuses the sanity-check loader)
    t_val = time.time()
    if epoch - val_loader_epoch >= 1:
      val_loader = model.val_dataloader()
      val_loader_epoch = epoch
    captured.pop("coupling", None)
    run_validation(val_loader)
    t_val = time.time() - t_val
    # training_epoch_end: the only place the direction flips
    model.training_epoch_end([])
    t_ep = time.time() - t_ep

    fm = fit_metrics(captured["fit"], fit_seed + epoch + 1)
    fm.update({"after": f"epoch{epoch}", "coupling_direction": direction,
               "coupling_collision": coupling_collision(), "seconds": t_val})
    results["fits"].append(fm)
    ev_fwd = model_metrics("fwd", 20_000 + epoch)
    ev_fwd_raw = model_metrics("fwd", 20_000 + epoch, use_ema=False)
    ev_bwd = model_metrics("bwd", 30_000 + epoch)
    rec = {
        "epoch": epoch, "direction_trained": direction, "steps": len(losses),
        "skipped": n_skip, "loss_first100": float(np.mean(losses[:100])),
        "loss_last100": float(np.mean(losses[-100:])), "lr": scheduler.get_last_lr()[0],
        "seconds_epoch": t_ep, "seconds_train": t_train, "seconds_val": t_val,
        "fit_trained_on": results["fits"][epoch], "fit_after": fm,
        "fwd_ema": ev_fwd, "fwd_raw": ev_fwd_raw, "bwd_ema": ev_bwd,
    }
    results["epochs"].append(rec)
    print(f"[epoch {epoch} {direction}] {json.dumps(rec)}", flush=True)
    with open(args.out, "w") as f:
      json.dump(results, f, indent=1)
    if epoch == 0:
      est = t_init + t_ep * args.epochs
      print(f"[estimate] total ~ {est/60:.1f} min for {args.epochs} epochs", flush=True)

  os.chdir(cwd)
  print("done", flush=True)


if __name__ == "__main__":
  main()
