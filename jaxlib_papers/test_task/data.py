"""The paper's own evaluation results as one table of models.

Layout (the upstream repository's, under ``notebooks/``; the library fetches each file from
the pinned commit, ``core.datasets`` names ``test_task/<path>``, listed in ``MANIFEST.tsv``):

* ``utils.py``: the dict literals ``model2compute`` (N parameters and D tokens, billions)
  and ``model2date`` ('yymm'), read with ``ast.literal_eval`` (the file is never executed);
* ``evaluations/base/<m>-{mmlu,gsm8k}.json``: lm-eval 5-shot results of the base models;
* ``evaluations/e3/mmluaux/<m>-mmlu.json``, ``evaluations/e3/gsm8kaux/<m>-gsm8k.json``: after
  3 epochs of fine-tuning on the task data (MMLU auxiliary_train; Orca-Math + MetaMathQA);
* ``evaluations/intermediate/{mmluaux,gsm8kaux}/evals/<m>/step_<s>/{mmlu,gsm8k}.json``: the
  older models after s steps of 64 examples (MMLU s = 1000; GSM8K s = 250, 1000, 25000).

A user's own results in the same layout (a clone of the upstream repository, or new models
added to both tables) load the same way: :func:`load_table` takes the folder.
"""

from __future__ import annotations

import ast
import json
import math
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from jaxlib_papers.core import datasets

PREFIX = "test_task"               # core.datasets names: "test_task/<upstream path>"
TABLES = "notebooks/utils.py"
CUTOFF = "2311"                    # release 'yymm' >= '2311' is "newer" (as the code counts)
FLOPS_PER_PARAM_TOKEN = 6e18       # C = 6 N D with N, D in billions
EXAMPLES_PER_STEP = 64             # fine-tuning batch size: k = 64 * steps
CHANCE = {"mmlu": 0.25, "gsm8k": 0.0}
STEPS = {"mmlu": (1000,), "gsm8k": (250, 1000, 25000)}
MMLU_METRICS = ("mean_all", "aggregate")


class ModelTable(NamedTuple):
  """One row per model (arrays [n] in the order of ``models``; NaN: no such evaluation).

  ``scores`` columns: ``<bench>_pre`` (base), ``<bench>_ft`` (3 epochs on the task data) and
  ``<bench>_s<steps>`` (older models after ``steps`` x 64 examples), bench in mmlu, gsm8k.
  """
  models: tuple[str, ...]          # [n] names
  params: np.ndarray               # [n] N, billions of parameters
  tokens: np.ndarray               # [n] D, billions of pretraining tokens
  compute: np.ndarray              # [n] C = 6e18 N D FLOPs
  release: tuple[str, ...]         # [n] 'yymm'
  new: np.ndarray                  # [n] 1.0 if release >= CUTOFF else 0.0
  scores: dict[str, np.ndarray]    # column -> [n] accuracy
  source: str                      # where the files came from


def read_tables(path: str | os.PathLike) -> tuple[dict, dict]:
  """``(model2compute, model2date)`` of the upstream ``notebooks/utils.py``, via ``ast``.

  Raises:
    ValueError: the file lacks either dict literal, or an entry is malformed (naming it).
  """
  tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"), filename=str(path))
  found = {}
  for node in tree.body:
    if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("model2compute", "model2date")):
      try:  # a repeated key keeps its last value, as Python's dict display does
        found[node.targets[0].id] = ast.literal_eval(node.value)
      except ValueError as e:
        raise ValueError(f"{path}:{node.lineno}: {node.targets[0].id} is not a literal "
                         f"({e})") from None
  missing = [n for n in ("model2compute", "model2date") if n not in found]
  if missing:
    raise ValueError(f"{path}: no dict literal {missing} (expected the upstream "
                     f"notebooks/utils.py)")
  for model, entry in found["model2compute"].items():
    if not (isinstance(entry, dict) and all(
        isinstance(entry.get(k), (int, float)) and entry[k] > 0 for k in ("N", "D"))):
      raise ValueError(f"{path}: model2compute[{model!r}] = {entry!r}: expected "
                       f"{{'N': params > 0, 'D': tokens > 0}} (billions)")
  for model, date in found["model2date"].items():
    if not (isinstance(date, str) and len(date) == 4 and date.isdigit()):
      raise ValueError(f"{path}: model2date[{model!r}] = {date!r}: expected 'yymm'")
  return found["model2compute"], found["model2date"]


def _results(path: pathlib.Path) -> dict:
  try:
    results = json.loads(path.read_text(encoding="utf-8"))["results"]
  except (json.JSONDecodeError, KeyError, TypeError) as e:
    raise ValueError(f"{path}: not an lm-eval results file (no 'results' object)") from e
  if not isinstance(results, dict):
    raise ValueError(f"{path}: 'results' is not an object")
  return results


def mmlu_accuracy(path: str | os.PathLike, metric: str = "mean_all") -> float:
  """MMLU accuracy of an lm-eval file: ``mean_all`` (the upstream code's unweighted mean of
  ``acc,none`` over all 62 entries: aggregate, 4 categories, 57 subjects) or ``aggregate``
  (lm-eval's own ``mmlu`` entry)."""
  path = pathlib.Path(path)
  results = _results(path)
  if metric not in MMLU_METRICS:
    raise ValueError(f"mmlu metric must be one of {MMLU_METRICS}, got {metric!r}")
  try:
    values = [float(results["mmlu"]["acc,none"])] if metric == "aggregate" else [
        float(v["acc,none"]) for v in results.values()]
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{path}: an MMLU entry lacks a numeric 'acc,none' ({e!r})") from e
  return float(np.mean(values))


def gsm8k_accuracy(path: str | os.PathLike) -> float:
  """``results.gsm8k["exact_match,flexible-extract"]`` of an lm-eval file."""
  path = pathlib.Path(path)
  try:
    return float(_results(path)["gsm8k"]["exact_match,flexible-extract"])
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{path}: no numeric results.gsm8k['exact_match,flexible-extract']"
                     ) from e


def evaluation_paths(model: str) -> dict[str, tuple[str, bool]]:
  """``{column: (upstream path, required)}`` of one model's evaluation files."""
  base = "notebooks/evaluations"
  out = {
      "mmlu_pre": (f"{base}/base/{model}-mmlu.json", True),
      "gsm8k_pre": (f"{base}/base/{model}-gsm8k.json", True),
      "mmlu_ft": (f"{base}/e3/mmluaux/{model}-mmlu.json", True),
      "gsm8k_ft": (f"{base}/e3/gsm8kaux/{model}-gsm8k.json", True),
  }
  for bench, steps in STEPS.items():
    for step in steps:
      out[f"{bench}_s{step}"] = (
          f"{base}/intermediate/{bench}aux/evals/{model}/step_{step}/{bench}.json", False)
  return out


Resolver = Callable[[str], "pathlib.Path | None"]


def _folder_resolver(root: pathlib.Path) -> Resolver:
  def resolve(relative: str) -> pathlib.Path | None:
    path = root / relative
    return path if path.is_file() else None
  return resolve


def _row(model: str, resolve: Resolver, metric: str, where: str) -> dict[str, float]:
  row = {}
  for column, (relative, required) in evaluation_paths(model).items():
    path = resolve(relative)
    if path is None:
      if required:
        raise FileNotFoundError(f"model {model!r}: evaluation file {relative} not found in "
                                f"{where}")
      row[column] = math.nan
      continue
    row[column] = (mmlu_accuracy(path, metric) if column.startswith("mmlu")
                   else gsm8k_accuracy(path))
  return row


def load_table(source: str | os.PathLike | Mapping[str, os.PathLike], *,
               models: list[str] | None = None, mmlu_metric: str = "mean_all") -> ModelTable:
  """Reads the tables and every evaluation file into a :class:`ModelTable`.

  Args:
    source: a folder laid out like the upstream repository (holding ``notebooks/...``), or
      ``{upstream path: local path}`` (what :func:`fetch_table` fetched).
    models: the models to read (default every key of ``model2compute``).
    mmlu_metric: "mean_all" (the paper's code) or "aggregate" (lm-eval's ``mmlu``).

  Raises:
    FileNotFoundError: ``utils.py`` or a base / fine-tuned evaluation file is missing
      (named); intermediate steps may be missing (NaN).
    KeyError: a model without an entry in ``model2compute`` or ``model2date`` (named).
    ValueError: a malformed table or evaluation file (named).
  """
  if isinstance(source, Mapping):
    mapping = {k: pathlib.Path(v) for k, v in source.items()}
    resolve, where = mapping.get, "the fetched files"
  else:
    root = pathlib.Path(source).expanduser()
    if not root.is_dir():
      raise FileNotFoundError(f"source {str(root)!r} is not a folder (expected one holding "
                              f"{TABLES} and notebooks/evaluations/)")
    resolve, where = _folder_resolver(root), str(root)
  tables_path = resolve(TABLES)
  if tables_path is None:
    raise FileNotFoundError(f"{TABLES} not found in {where}")
  model2compute, model2date = read_tables(tables_path)
  models = sorted(model2compute) if models is None else list(models)
  for model in models:
    for name, table in (("model2compute", model2compute), ("model2date", model2date)):
      if model not in table:
        raise KeyError(f"model {model!r} is absent from the metadata table {name} in "
                       f"{TABLES}")
  rows = [_row(m, resolve, mmlu_metric, where) for m in models]
  params = np.array([float(model2compute[m]["N"]) for m in models])
  tokens = np.array([float(model2compute[m]["D"]) for m in models])
  release = tuple(model2date[m] for m in models)
  return ModelTable(
      models=tuple(models), params=params, tokens=tokens,
      compute=FLOPS_PER_PARAM_TOKEN * params * tokens, release=release,
      new=np.array([float(d >= CUTOFF) for d in release]),
      scores={c: np.array([r[c] for r in rows]) for c in rows[0]} if rows else {},
      source=where)


def manifest_names() -> list[str]:
  """The ``core.datasets`` names of the files (``test_task/<upstream path>``)."""
  return datasets.manifest_names(PREFIX)


def fetch_files(data_dir: str | os.PathLike | None = None,
                locate: Callable[[str], pathlib.Path | None] | None = None
                ) -> dict[str, pathlib.Path]:
  """Fetches every listed file (sha256-checked; downloads renamed into the cache whole).

  Args:
    data_dir: a local folder laid out like ``<data_dir>/test_task/notebooks/...``.
    locate: instead of ``core.datasets.fetch``, ``name -> path or None`` (a reproduction
      check's ``ctx.data_file``); None for a file raises ``DataUnavailable``.

  Returns:
    ``{upstream path: local path}`` for :func:`load_table`.
  """
  out = {}
  for name in manifest_names():
    path = datasets.fetch(name, data_dir) if locate is None else locate(name)
    if path is None:
      raise datasets.DataUnavailable(f"{name}: not available")
    out[name[len(PREFIX) + 1:]] = pathlib.Path(path)
  return out


def fetch_table(data_dir: str | os.PathLike | None = None, *, mmlu_metric: str = "mean_all"
                ) -> ModelTable:
  """:func:`fetch_files` then :func:`load_table`: the paper's 53 models."""
  return load_table(fetch_files(data_dir), mmlu_metric=mmlu_metric)._replace(
      source=f"core.datasets: {PREFIX}/ ({len(manifest_names())} files)")
