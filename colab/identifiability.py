# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Cross-entropy is all you need to invert the data-generating process
#
# Reizinger, Bizeul, Juhos, Vogt, Balestriero, Brendel, Klindt (ICLR 2025). Latents z
# live on the sphere and come from a von Mises-Fisher mixture around cluster vectors v_c;
# a frozen, injective leaky-ReLU network mixes them into observations x = g(z). An encoder
# f trained with plain cross-entropy, on the cluster label (supervised) or on each
# sample's instance index (DIET), recovers z up to a linear map; with unit-norm head rows,
# up to an orthogonal map scaled by 1/kappa. We check it the paper's way: a linear
# regression from f(x) to z, R^2 on held-out samples, against raw x and an untrained f.

# %%
# On Colab: install the suite (a no-op in a checkout, in CI, or where it is installed).
import importlib.util
import subprocess
import sys

REPO_URL = "https://github.com/jaxlib-papers/jaxlib-papers"  # a fork changes only this
if importlib.util.find_spec("jaxlib_papers") is None:
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"git+{REPO_URL}"], check=True)

# %%
import os

import jax
import numpy as np

from jaxlib_papers.core import figures
from jaxlib_papers.identifiability import data, evaluate, plotting, train
from jaxlib_papers.identifiability.configs.default import get_config

PRESET = os.environ.get("JAXLIB_PAPERS_DEMO_PRESET", "smoke")

# %% [markdown]
# ## Supervised CE and DIET in one program each (seeds vmapped)
#
# Supervised: d = 5, |C| = 100, kappa = 10. DIET: N = 1000 instance labels, with free and
# with unit-norm head rows (two variants of equal shape, trained together).

# %%
sup_config = get_config(PRESET)
sup = train.run(sup_config, None)
diet_config = get_config(PRESET)
diet_config.objective.kind = "diet"
diet_config.objective.normalize_head = (False, True)
diet = train.run(diet_config, None)
print(f"preset {PRESET}: {sup.optimizer_steps} Adam steps per run, "
      f"{sup_config.num_seeds} seeds")
for name, res in (("supervised", sup), ("DIET", diet)):
  for e in res.summary:
    print(f"{name:>10} normW={e['normalize_head']!s:5}: R2(z) {e['r2_z']:.3f}±"
          f"{e['r2_z_std']:.3f} | raw x {e['r2_x']:.3f} | untrained f "
          f"{e['r2_z_untrained']:.3f} | R2(W->v) {e['r2_head']:.3f} | CE "
          f"{e['model_ce']:.3f} (Bayes {e['bayes_ce']:.3f})")
diet_norm = [e for e in diet.summary if e["normalize_head"]][0]
print(f"normalised W: R2 without intercept {diet_norm['r2_z_no_intercept']:.3f}, "
      f"singular values of the fit vs 1/kappa: MAE {diet_norm['sv_mae_z']:.3f}; "
      f"same-class head-row cosine {diet.summary[0]['head_cosine']:.3f}")

# %% [markdown]
# ## What the linear read-out sees: z against its prediction from f(x) (seed 0)

# %%
kern, state = sup.kernel, sup.state
run0 = jax.tree.map(lambda leaf: leaf[0], state)
batch = data.sample_batch(jax.random.key(7), run0.problem, run0.kappa, 2048,
                          sup.settings.num_indices)
h = kern.features(run0, batch.x)
coef, bias = evaluate.fit_linear(h[:1024], batch.z[:1024])
pred = np.asarray(h[1024:] @ coef + bias)
coef_x, bias_x = evaluate.fit_linear(batch.x[:1024], batch.z[:1024])
pred_x = np.asarray(batch.x[1024:] @ coef_x + bias_x)
z = np.asarray(batch.z[1024:])
figures.show(plotting.readout_figure(sup, diet, z, pred, pred_x))

# %% [markdown]
# ## Sprites: CE on the shape, then decode scale and position linearly
#
# A stand-in for the paper's DisLib experiment (Table 4), rendered in code: squares,
# ellipses and triangles at several scales and positions. The encoder only ever sees the
# shape label; the other factors are decoded from its last hidden layer by least squares.

# %%
spr = train.run(get_config(f"sprites,{PRESET}"), None)
for key in ("pixels", "untrained", "trained"):
  print(f"{key:>9}: " + ", ".join(f"{f} r={v:.3f}"
                                   for f, v in zip(spr.factors, spr.r[key].mean(0))))
sprites = data.render_sprites(int(get_config(f"sprites,{PRESET}").sprites.size), 6, 4)
figures.show(plotting.sprites_figure(sprites.images[[0, 40, 100, 130]], spr))
