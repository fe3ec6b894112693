"""Affinity data: the official CSV files, RDKit fingerprints, a generated stand-in.

A data file has no header: SMILES, then the -log10 M affinity (pIC50 or pKi), one molecule
a row. Fingerprints are RDKit's Morgan bits, radius 2, 2048 bits (bit-identical to the
official code's ``GetMorganFingerprintAsBitVect(m, 2)``). Offline, :func:`generated`
draws fingerprint-like 0/1 vectors with cluster structure (no SMILES: families of
molecules around prototype bit sets) and labels that depend on the family and the bits.
"""

from __future__ import annotations

import csv
import pathlib
from typing import NamedTuple

import numpy as np

DATASETS = ("IC50_EGFR", "IC50_BACE1", "Ki_Carbonic_anhydrase_I",
            "Ki_Carbonic_anhydrase_II")
NUM_BITS = 2048


class AffinityData(NamedTuple):
  """One affinity set."""
  name: str
  fingerprints: np.ndarray   # [N, B] uint8 0/1
  labels: np.ndarray         # [N] float64 -log10 M affinity
  smiles: tuple[str, ...]    # [N] ('' for generated data)
  source: str                # "shared: ...", "fetched: ...", "generated ..."


def read_csv(path: str | pathlib.Path) -> tuple[tuple[str, ...], np.ndarray]:
  """(SMILES [N], labels [N]) of a headerless two-column file.

  Raises:
    ValueError: a row without two columns or with a non-finite label (file and row named).
  """
  path = pathlib.Path(path)
  smiles, labels = [], []
  with path.open(newline="") as handle:
    for row_number, row in enumerate(csv.reader(handle)):
      if len(row) < 2:
        raise ValueError(f"{path}: row {row_number} has {len(row)} column(s); expected "
                         "SMILES,affinity")
      try:
        value = float(row[1])
      except ValueError:
        value = float("nan")
      if not np.isfinite(value):
        raise ValueError(f"{path}: row {row_number}: affinity {row[1]!r} is not a finite "
                         "number")
      smiles.append(row[0].strip())
      labels.append(value)
  if not smiles:
    raise ValueError(f"{path}: no rows")
  return tuple(smiles), np.asarray(labels, np.float64)


def fingerprints(smiles, radius: int = 2, num_bits: int = NUM_BITS) -> np.ndarray:
  """[N, num_bits] uint8 Morgan bits of each SMILES.

  Raises:
    ValueError: an unparsable SMILES, named with its row (before any other work).
  """
  from rdkit import Chem, RDLogger  # pylint: disable=g-import-not-at-top
  from rdkit.Chem import rdFingerprintGenerator  # pylint: disable=g-import-not-at-top
  RDLogger.DisableLog("rdApp.*")
  molecules = []
  for row, text in enumerate(smiles):
    molecule = Chem.MolFromSmiles(text) if text else None
    if molecule is None:
      raise ValueError(f"smiles: row {row} ({text!r}) is not a parsable SMILES")
    molecules.append(molecule)
  generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=num_bits)
  return np.stack([generator.GetFingerprintAsNumPy(m).astype(np.uint8) for m in molecules])


def scaffolds(smiles) -> list[str]:
  """Bemis-Murcko scaffold SMILES of each molecule ('' for acyclic ones)."""
  from rdkit import Chem  # pylint: disable=g-import-not-at-top
  from rdkit.Chem.Scaffolds import MurckoScaffold  # pylint: disable=g-import-not-at-top
  return [MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(s)) for s in smiles]


def _zipf_choice(rng: np.random.Generator, groups: int, size: int) -> np.ndarray:
  weights = rng.zipf(1.5, size=groups).astype(np.float64)
  return rng.choice(groups, size=size, p=weights / weights.sum())


# Remote clusters: 10% of the molecules, in groups of 1-10 analogues far from everything
# else, sizes P(k) ~ k^-1.3. With them (and series keeping 85% of their bits) the stand-in
# has EGFR's similarity profile: the share of molecules whose k-th nearest neighbour is
# below Tanimoto 1/3 is 1.4 / 2.5 / 4.7 / 9.8% on EGFR at k = 1 / 2 / 4 / 10 (1.3-1.7 /
# 2.5-3.0 / 5.1-5.7 / 10.2-12.0% over generator seeds 0-2), and a random split's bins
# [low, mid, high] hold 1.9 / 11 / 87% of EGFR's test set (1.8-1.9 / 7.5-12 / 86-90.5%).
REMOTE_FRACTION = 0.10
REMOTE_SIZES = np.arange(1, 11)
REMOTE_SIZE_EXPONENT = 1.3


def _remote_clusters(rng: np.random.Generator, members: np.ndarray) -> list[np.ndarray]:
  p = REMOTE_SIZES ** -REMOTE_SIZE_EXPONENT
  sizes = rng.choice(REMOTE_SIZES, size=len(members), p=p / p.sum())
  ends = np.cumsum(sizes)
  return [members[a:b] for a, b in zip(np.r_[0, ends], ends) if a < len(members)]


def _analogues(rng: np.random.Generator, prototypes: np.ndarray, keep: float) -> np.ndarray:
  """Molecules around ``prototypes`` [n, B]: each keeps a bit with probability ``keep`` and
  sets ~4 random others."""
  shape = prototypes.shape
  kept = prototypes & (rng.uniform(size=shape) < keep)
  return kept | (rng.uniform(size=shape) < 4.0 / shape[1])


def generated(num: int, seed: int = 0, num_families: int | None = None,
              num_bits: int = NUM_BITS, name: str = "generated") -> AffinityData:
  """A stand-in with EGFR's cluster structure: series within families, remote clusters.

  ``num_families`` (default N / 16) families, each a prototype of 45 bits from a shared
  pool of 400 (different families: Tanimoto ~0.06); N / 4 series, each in a Zipf-chosen
  family, whose prototype keeps 70% of the family's bits and adds 10 of the pool (series of
  one family: ~0.5); molecules in Zipf-sized series keep 85% of their series' bits and add
  ~4 random ones (one series: ~0.75). 10% of the molecules instead form remote clusters of
  1-10 analogues around a 45-bit prototype of their own (keeping 93% of it): a random
  split keeps one of a cluster's molecules in training and its test molecules in the top
  bin, while a split that moves whole clusters fills the low bin, as on EGFR (the
  constants above). Labels: a family (or remote cluster) mean N(6.5, 1), a series shift
  N(0, 0.5), a sparse linear effect of the bits and noise (sd 0.3).
  """
  rng = np.random.default_rng(seed)
  num_families = max(4, num // 16) if num_families is None else int(num_families)
  num_series = max(num_families, num // 4)
  pool = rng.choice(num_bits, size=min(400, num_bits), replace=False)
  size = min(45, len(pool))
  family_bits = np.zeros((num_families, num_bits), bool)
  for f in range(num_families):
    family_bits[f, rng.choice(pool, size=size, replace=False)] = True
  series_family = _zipf_choice(rng, num_families, num_series)
  series_bits = family_bits[series_family] & (rng.uniform(size=(num_series, num_bits)) < 0.7)
  for k in range(num_series):
    series_bits[k, rng.choice(pool, size=min(10, len(pool)), replace=False)] = True
  series = _zipf_choice(rng, num_series, num)
  bits = _analogues(rng, series_bits[series], 0.85)
  base = (rng.normal(6.5, 1.0, num_families)[series_family[series]]
          + rng.normal(0, 0.5, num_series)[series])
  remote = np.flatnonzero(rng.uniform(size=num) < REMOTE_FRACTION)
  for members in _remote_clusters(rng, remote):
    prototype = np.zeros(num_bits, bool)
    prototype[rng.choice(pool, size=size, replace=False)] = True
    bits[members] = _analogues(rng, np.broadcast_to(prototype, (len(members), num_bits)),
                               0.93)
    base[members] = rng.normal(6.5, 1.0)
  effect = np.where(rng.uniform(size=num_bits) < 0.05, rng.normal(0, 0.4, num_bits), 0.0)
  labels = base + bits @ effect + rng.normal(0, 0.3, num)
  return AffinityData(name, bits.astype(np.uint8), labels, ("",) * num,
                      f"generated ({num} fingerprint-like vectors, {num_families} families, "
                      f"{num_series} series, {len(remote)} in remote clusters)")


def from_smiles(name: str, smiles, labels, source: str) -> AffinityData:
  """An :class:`AffinityData` from SMILES and labels (the user's own set)."""
  labels = np.asarray(labels, np.float64)
  if labels.shape != (len(smiles),):
    raise ValueError(f"labels: expected [{len(smiles)}] (one per SMILES), got "
                     f"{labels.shape}")
  return AffinityData(name, fingerprints(smiles), labels, tuple(smiles), source)


def load(name: str, path: pathlib.Path | None, source: str, fallback_size: int,
         seed: int = 0) -> AffinityData:
  """The official set ``name`` from ``path``, or (path None: offline) a generated one."""
  if path is None:
    return generated(fallback_size, seed, name=name)._replace(
        source=f"generated (offline: sae_split/{name}.csv)")
  smiles, labels = read_csv(path)
  return from_smiles(name, smiles, labels, source)
