"""Reproduction check of sae_split (``launch.reproduce --only=sae_split``).

The paper (Zhang, Hu, Jiang, Chen, Xu, Zhang; ICLR 2025): random splits of affinity data
leave the test set dominated by molecules very similar to the training set (88% of EGFR's
above 2/3 Tanimoto); SAE's optimisation places the test set on a target histogram
([295, 289, 289] against 291 per bin on EGFR, the official run); models collapse on the
low-similarity molecules. At ``cpu`` (EGFR; ``full``: all four sets) the brief's assertions
(``../shared/papers/sae_split.md``, section 5):

1. Random split, 5 seeds: the top-bin fraction >= 0.83 on every seed.
2. SAE: every bin within E_k n_test +- 15 (291 +- 15 on EGFR); normalised L1 <= 0.04;
   |sum W - a N| / (a N) <= 0.06 (0.01 at ``full``).
3. SAE's L1 below every random seed's, the scaffold split's and Butina 0.4's and 0.6's.
4. On SAE's split ridge and kNN R^2 rise low < mid < high, and the overall R^2 <= the
   random split's mean - 0.2; on random, the overall R^2 within 0.1 of its high bin.
5. The neighbour table with k = N equals the dense readout (R to 1e-5, 1,000 molecules),
   and the readout condition (every test row has a training sample among its k) holds on
   the final split.

Plus: our Tanimoto readout of the official EGFR split gives its published histogram. The
check's seed sets the solver seeds. Offline (no EGFR file) the same claims run on a
generated stand-in with EGFR's similarity profile (``data.generated``, drawn with the
check's seed; solved with ``data.generated_iterations`` and ``generated_seeds``).
``smoke``: a generated set, the pipeline's claims only.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import figures, prng, results
from jaxlib_papers.core.reproduce import Claim, Context, register
from jaxlib_papers.sae_split import data, evaluate, kernel, plotting, train
from jaxlib_papers.sae_split.configs import default as default_config

PAPER_TOP = {"IC50_EGFR": "0.88 (paper, Fig. 1); brief 0.870 (0.848-0.885, 20 seeds)",
             "IC50_BACE1": "brief 0.904", "Ki_Carbonic_anhydrase_I": "brief 0.771",
             "Ki_Carbonic_anhydrase_II": "brief 0.780"}
OFFICIAL_COUNTS = [295, 289, 289]


def _fmt(values, digits=2) -> str:
  return "/".join(f"{v:.{digits}f}" for v in values)


def _split_claims(s: train.SetResult, preset: str, data_label: str) -> list[Claim]:
  del preset
  tops = [r.top_fraction for r in s.random]
  return [Claim(
      f"{s.name}: random split, {len(tops)} seeds: top-bin fraction >= 0.83 on every seed",
      PAPER_TOP.get(s.name, "-"),
      f"{np.mean(tops):.3f} (min {min(tops):.3f}, max {max(tops):.3f})",
      bool(min(tops) >= 0.83), data_label)]


def _sae_claims(s: train.SetResult, result: train.RunResult, preset: str, label: str
                ) -> list[Claim]:
  expected = np.asarray(result.weights) * s.num_test
  used = expected > 0
  counts = np.asarray(s.sae.counts)
  deviation = np.abs(counts - expected)[used]
  mass = abs(s.sae_relaxed_test_mass - s.sae_test_mass_target) / s.sae_test_mass_target
  mass_bound = 0.01 if preset == "full" else 0.06
  others = [r.l1 for r in s.random] + [b.l1 for b in s.baselines]
  names = [f"random {i}" for i in range(len(s.random))] + [b.name for b in s.baselines]
  out = [Claim(
      f"{s.name}: SAE test histogram: every bin within target +- 15 (target "
      f"{_fmt(expected[used], 1)}), L1 <= 0.04, |sum W - aN| / aN <= {mass_bound:g}",
      f"official run {OFFICIAL_COUNTS} vs 291, sum W 865.66 of 872.2",
      f"{counts[used].tolist()} (max dev {deviation.max():.0f}), L1 {s.sae.l1:.4f}, sum W "
      f"{s.sae_relaxed_test_mass:.1f} of {s.sae_test_mass_target:.1f} ({mass:.3f}); "
      f"seed scores {_fmt(s.sae_seed_scores, 4)}; kept iteration {s.sae_best_iteration}",
      bool(deviation.max() <= 15 and s.sae.l1 <= 0.04 and mass <= mass_bound), label)]
  out.append(Claim(
      f"{s.name}: SAE's L1 to the target below random (every seed), scaffold and Butina",
      "brief: scaffold [78, 263, 532], Butina 0.4 [305, 339, 229], 0.6 [207, 394, 272]",
      f"SAE {s.sae.l1:.4f}; " + ", ".join(f"{n} {v:.3f}" for n, v in zip(names, others))
      + "; " + ", ".join(f"{b.name} {b.counts}" for b in s.baselines),
      bool(s.sae.l1 < min(others)), label))
  return out


def _mean_scores(s: train.SetResult, split: str, model: str) -> tuple[float, np.ndarray]:
  rows = [m for m in s.models if m.split == split and m.model == model]
  return (float(np.mean([m.r2 for m in rows])),
          np.nanmean(np.array([m.r2_per_bin for m in rows], np.float64), 0))


def _model_claims(s: train.SetResult, result: train.RunResult, label: str) -> list[Claim]:
  used = np.asarray(result.weights) > 0
  out = []
  for model in ("ridge", "knn"):
    sae, sae_bins = _mean_scores(s, "sae", model)
    rnd, rnd_bins = _mean_scores(s, "random", model)
    sae_bins, rnd_bins = sae_bins[used], rnd_bins[used]
    rising = bool(np.all(np.diff(sae_bins) > 0))
    out.append(Claim(
        f"{s.name} {model}: on SAE's split R^2 rises bin by bin and overall <= random's - "
        f"0.2; on random, overall within 0.1 of its top bin",
        "brief (EGFR) random ridge .56, per bin -1.9/.21/.63; SAE ridge .05, -.78/.17/.64;"
        " kNN random .69, SAE .31 (-.24/.32/.73); SAM-DTA high .65, low -.64",
        f"SAE {sae:.2f} ({_fmt(sae_bins)}); random {rnd:.2f} ({_fmt(rnd_bins)}, mean of "
        f"{len(s.random)} seeds)",
        bool(rising and sae <= rnd - 0.2 and abs(rnd - rnd_bins[-1]) <= 0.1), label,
        why=("" if not label.startswith("generated") else
             "the offline stand-in's draw: it held on draws (check seeds) 0-4 and holds on "
             "EGFR (seeds/sae_split.md)")))
  return out


def dense_equals_table(fingerprints: np.ndarray, num: int, seed: int) -> float:
  """max |R_table(k = n) - R_dense| over the first ``num`` molecules at a random W."""
  fps = jnp.asarray(fingerprints[:num], jnp.float32)
  n = fps.shape[0]
  membership = prng.uniform(jax.random.key(seed), (n,))
  table = kernel.neighbour_table(fps, n, min(256, n))
  dense = kernel.dense_table(kernel.tanimoto(fps, fps))
  r_table = kernel.soft_readout(membership, *table, 100.0)
  r_dense = kernel.soft_readout(membership, *dense, 100.0)
  return float(jnp.max(jnp.abs(r_table - r_dense)))


def _table_claims(s: train.SetResult, fingerprints: np.ndarray, neighbours: int, seed: int,
                  label: str) -> list[Claim]:
  error = dense_equals_table(fingerprints, 1000, seed)
  return [Claim(
      f"{s.name}: the table with k = n equals the dense soft readout (n = "
      f"{min(1000, s.num)}, |dR| <= 1e-5); the final split's readout condition holds "
      f"(k = {neighbours or 'N'})",
      "brief: failing rows on the official split k 128 -> 4, 256 -> 0",
      f"max |dR| {error:.1e}; failing test rows {s.table_failures}, max |r_table - r_exact| "
      f"{s.table_max_error:.3f} (the reported counts are exact)",
      bool(error <= 1e-5 and s.table_exact), label)]


def official_counts(ctx: Context, dataset: data.AffinityData, edges) -> Claim | None:
  """Our exact readout of the official EGFR test set (its SMILES matched in the full set)."""
  path = ctx.data_file("sae_split/IC50_EGFR_balanced_test.csv",
                       fallback="skipping the official split's histogram")
  if path is None or dataset.name != "IC50_EGFR" or not all(dataset.smiles):
    return None
  test_smiles = set(data.read_csv(path)[0])
  test = np.array([s in test_smiles for s in dataset.smiles])
  counts = evaluate.counts(evaluate.max_similarity_to_train(dataset.fingerprints, test),
                           edges)
  return Claim("EGFR: our Tanimoto readout of the official SAE split gives its histogram",
               f"{OFFICIAL_COUNTS} (info.csv)", f"{counts.tolist()} ({int(test.sum())} test)",
               bool(counts.tolist() == OFFICIAL_COUNTS),
               ctx.data_label("sae_split/IC50_EGFR_balanced_test.csv"))


def _load(ctx: Context, config) -> tuple[list[data.AffinityData], list[str]]:
  sets, labels = [], []
  for name in config.data.sets:
    if name == "generated":
      sets.append(data.generated(int(config.data.generated_size), ctx.seed))
      labels.append("generated")
      continue
    relative = f"sae_split/{name}.csv"
    path = ctx.data_file(relative)
    label = ctx.data_label(relative)
    sets.append(data.load(name, path, label, int(config.data.generated_size), ctx.seed))
    labels.append(label)
  return sets, labels


@register("sae_split", cpu_seconds=110)
def check(ctx: Context) -> list[Claim]:
  config = default_config.get_config(ctx.preset)
  config.seed = ctx.seed
  sets, labels = _load(ctx, config)
  result = train.run(config, None, sets=sets, log=ctx.progress)
  claims: list[Claim] = []
  for s, dataset, label in zip(result.sets, sets, labels):
    claims += _split_claims(s, ctx.preset, label) if ctx.preset != "smoke" else []
    claims += _sae_claims(s, result, ctx.preset, label) if ctx.preset != "smoke" else []
    if ctx.preset == "smoke":
      claims.append(Claim(
          f"smoke {s.name}: SAE's L1 to the target below the random split's (every seed)",
          "-", f"SAE {s.sae.counts} L1 {s.sae.l1:.3f}; random "
          f"{_fmt([r.l1 for r in s.random], 3)}",
          bool(s.sae.l1 < min(r.l1 for r in s.random)), label))
    else:
      claims += _model_claims(s, result, label)
    claims += _table_claims(s, dataset.fingerprints, int(config.solver.neighbours),
                            ctx.seed, label)
    if ctx.preset != "smoke":
      official = official_counts(ctx, dataset, result.edges)
      claims += [official] if official is not None else []
  figures.save(plotting.histogram_figure(result), ctx.report_dir / "sae_split_hist.png")
  figures.save(plotting.r2_figure(result), ctx.report_dir / "sae_split_r2.png")
  tree = results.to_json_tree(result)
  for s in tree["sets"]:
    s.pop("readouts")
  (ctx.report_dir / "sae_split.json").write_text(json.dumps(tree, indent=1))
  return claims
