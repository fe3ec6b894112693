r"""Official DeepRUOT stages 1-2 on the gene CSV with t=2 held out, one seed: the reference
for the seed spread of the `ruot` check's gene claims (``seeds/ruot.md``). Not a speed
benchmark.

  git clone https://github.com/zhenyiizhang/DeepRUOT /tmp/DeepRUOT   # commit 2289c81
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
      python benchmarks/ruot_official_seeds.py SEED /tmp/DeepRUOT path/to/simulation_gene_data.csv

Prints one JSON line: W1 (exact, POT, weights normalised) and TMV (|sum w - N_t / N_0|)
at t = 1..4 of the model pushed by Euler (dt 0.01) from the 400 t=0 cells, and what
``train_un1`` was seen to use. ``SMOKE=1``: 2 passes per stage (a check that it runs).
Follows notebook/simulation_gene.ipynb cells 1-12 (FNet 128/3/leakyrelu, one Adam shared by
both stages, train_un1 50 batches lambda_mass=1 -> reload best -> freeze g -> train_un1 30
batches lambda_mass=0 -> reload best), except hold_out = 2.0 (the notebook passes the
parser default 'random', which is not a group and so holds nothing out) and device cpu.
Records, via wrappers around train.sample / train.odeint / train.cal_mass_loss / criterion,
which groups and intervals train_un1 actually used, and asserts t=2 never appears.
"""
import json
import logging
import os
import random
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, sys.argv[2])
import ot
import pandas as pd
from DeepRUOT import train
from DeepRUOT.models import FNet, ODEFunc2
from DeepRUOT.utils import _valid_criterions
from torchdiffeq import odeint as odeint_plain

seed = int(sys.argv[1])
torch.set_num_threads(1)
random.seed(seed)
np.random.seed(seed)
torch.random.manual_seed(seed)

CSV = sys.argv[3]
df = pd.read_csv(CSV)
groups = sorted(df.samples.unique())  # np.float64 values 0.0 .. 4.0, as the notebook
HOLD = groups[2]                      # np.float64(2.0): same type as df.samples values
assert HOLD == 2.0 and type(HOLD) is type(df.samples.values[0])

# ---- verification wrappers (record, do not change behaviour) -------------------------
rec = {"sampled_groups": [], "intervals": [], "mass_target_sizes": [], "ot_target_sizes": []}
_sample = train.sample
def sample_rec(data, group, *a, **k):
  out = _sample(data, group, *a, **k)
  rec["sampled_groups"].append(float(group))
  return out
train.sample = sample_rec
_odeint = train.odeint
def odeint_rec(func, y0, t, *a, **k):
  rec["intervals"].append(tuple(float(v) for v in t.detach()))
  return _odeint(func, y0, t, *a, **k)
train.odeint = odeint_rec
_cml = train.cal_mass_loss
def cml_rec(data_t1, *a, **k):
  rec["mass_target_sizes"].append(int(data_t1.shape[0]))
  return _cml(data_t1, *a, **k)
train.cal_mass_loss = cml_rec
class _NoTqdm:
  def __call__(self, it, *a, **k): return iter(it)
  @staticmethod
  def write(*a, **k): pass
train.tqdm = _NoTqdm()

# ---- notebook setup ------------------------------------------------------------------
device = torch.device("cpu")
f_net = FNet(in_out_dim=2, hidden_dim=128, n_hiddens=3, activation="leakyrelu").to(device)
optimizer = torch.optim.Adam(f_net.parameters())
criterion = _valid_criterions["ot1"]()
_crit_call = criterion.__call__
class CritRec:
  def __call__(self, source, target, *a, **k):
    rec["ot_target_sizes"].append(int(target.shape[0]))
    return _crit_call(source, target, *a, **k)
crit = CritRec()
initial_size = df[df["samples"] == 0].x1.shape[0]
sizes = df.groupby("samples").size()
relative_mass = torch.tensor((sizes / sizes.iloc[0]).values)
sample_size = (df[df["samples"] == 0.0].values.shape[0],)
tmp = tempfile.mkdtemp(prefix=f"ruot_official_{seed}_")
best = os.path.join(tmp, "best_model")
logger = logging.getLogger("off")
logger.setLevel(logging.WARNING)

common = dict(criterion=crit, use_cuda=False, local_loss=True, global_loss=False,
              apply_losses_in_time=True, hold_one_out=True, hold_out=HOLD, hinge_value=0.01,
              lambda_ot=0.1, lambda_energy=0.001, use_pinn=False, use_penalty=False,
              use_density_loss=False, lambda_density=10, top_k=5, sample_size=sample_size,
              relative_mass=relative_mass, initial_size=initial_size,
              sample_with_replacement=False, logger=logger, device=device,
              best_model_path=best)

t_start = time.time()
stage_rec = {}
devnull = open(os.devnull, "w")
SMOKE = os.environ.get("SMOKE") == "1"
for stage, nb, lm in (("stage1", 2 if SMOKE else 50, 1), ("stage2", 2 if SMOKE else 30, 0)):
  for v in rec.values():
    v.clear()
  old = sys.stdout
  sys.stdout = devnull
  try:
    _, b_loss, _ = train.train_un1(f_net, df, groups, optimizer, nb, lambda_mass=lm, **common)
  finally:
    sys.stdout = old
  # verification summary for this stage
  ivs = sorted(set(rec["intervals"]))
  stage_rec[stage] = {"intervals": ivs, "n_odeint": len(rec["intervals"]),
                      "sampled_groups": sorted(set(rec["sampled_groups"])),
                      "ot_target_sizes": sorted(set(rec["ot_target_sizes"])),
                      "mass_target_sizes": sorted(set(rec["mass_target_sizes"])),
                      "last_loss": float(b_loss[-1])}
  assert ivs == [(0.0, 1.0), (1.0, 3.0), (3.0, 4.0)], ivs
  assert 2.0 not in rec["sampled_groups"]
  n2 = int(sizes.loc[2.0])
  assert n2 not in rec["ot_target_sizes"] and n2 not in rec["mass_target_sizes"]
  assert len(rec["intervals"]) == 3 * nb
  # notebook: reload the best checkpoint; before stage 2 freeze g
  f_net.load_state_dict(torch.load(best, map_location=torch.device("cpu")))
  f_net.to(device)
  if stage == "stage1":
    for p in f_net.g_net.parameters():
      p.requires_grad = False
train_s = time.time() - t_start

# ---- evaluation ----------------------------------------------------------------------
x = torch.tensor(df[df.samples == 0.0][["x1", "x2"]].values, dtype=torch.float32)
lnw = torch.log(torch.ones(x.shape[0], 1) / x.shape[0])
out = {"seed": seed, "w1": {}, "tmv": {}, "sum_w": {}}
n0 = int(sizes.loc[0.0])
f_net.eval()
for k in range(1, 5):
  t = torch.tensor([float(k - 1), float(k)])
  xs, lws = odeint_plain(ODEFunc2(f_net), (x, lnw), t, method="euler",
                         options=dict(step_size=0.01))
  x, lnw = xs[-1].detach(), lws[-1].detach()
  w = torch.exp(lnw[:, 0]).double().numpy()
  y = df[df.samples == float(k)][["x1", "x2"]].values
  a = w / w.sum()
  b = np.full(y.shape[0], 1.0 / y.shape[0])
  M = ot.dist(x.double().numpy(), y, metric="euclidean")
  w1, log = ot.emd2(a, b, M, numItermax=10_000_000, log=True)
  if log["warning"]:
    out.setdefault("emd_warning", {})[k] = log["warning"]
  out["w1"][k] = round(float(w1), 5)
  out["tmv"][k] = round(abs(float(w.sum()) - y.shape[0] / n0), 5)
  out["sum_w"][k] = round(float(w.sum()), 5)
out["train_s"] = round(train_s, 1)
out["seconds"] = round(time.time() - t_start, 1)
out["hold_out"] = repr(HOLD)
out["verify"] = stage_rec
print(json.dumps(out), flush=True)
