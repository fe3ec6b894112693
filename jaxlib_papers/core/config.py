"""Config presets shared by every method: ``smoke`` | ``cpu`` | ``full``.

* ``smoke``: seconds on a CPU; what tests, CI and the Colab demos run.
* ``cpu``: the reproduction size, minutes on two CPU cores (``launch.reproduce``).
* ``full``: the paper's size, for a GPU or TPU.

A paper's ``configs/default.py`` calls :func:`make_config` with its base config and the
per-preset overrides, so every preset is the base plus a short, readable diff.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import ml_collections

PRESETS = ("smoke", "cpu", "full")


def check_preset(preset: str) -> str:
  """Returns ``preset`` if it is known, else raises a ValueError naming the choices."""
  if preset not in PRESETS:
    raise ValueError(
        f"unknown preset {preset!r}: expected one of {', '.join(PRESETS)}")
  return preset


def _set_dotted(tree: Any, dotted: str, value: Any) -> None:
  node = tree
  *parents, leaf = dotted.split(".")
  for i, name in enumerate(parents):
    if name not in node or not isinstance(node[name], (dict, ml_collections.ConfigDict)):
      raise KeyError(
          f"override {dotted!r}: {'.'.join(parents[:i + 1])!r} is not a config group")
    node = node[name]
  if leaf not in node:
    raise KeyError(f"override {dotted!r}: no such key in the base config")
  node[leaf] = value


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """Sets existing dotted keys of ``config`` in place (``{"csoc.num_iters": 10}``).

  Raises:
    KeyError: a key names no existing field or group (a typo would otherwise silently
      add a new field).
  """
  for dotted, value in overrides.items():
    _set_dotted(config, dotted, value)
  return config


def make_config(
    preset: str,
    base: Mapping[str, Any],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> ml_collections.ConfigDict:
  """Builds the config of ``preset`` from a base and per-preset dotted overrides.

  Args:
    preset: one of :data:`PRESETS`.
    base: nested dict, the complete config (every key a preset may change must exist).
    overrides: ``{preset: {"loop.num_steps": 100, ...}}``; presets may be missing.

  Returns:
    A ConfigDict with an extra top-level ``preset`` field.

  Raises:
    ValueError: unknown preset.
    KeyError: an override names a key the base config lacks (a typo would otherwise
      silently add a new field).
  """
  check_preset(preset)
  tree = copy.deepcopy(dict(base))
  for dotted, value in (overrides or {}).get(preset, {}).items():
    _set_dotted(tree, dotted, value)
  tree["preset"] = preset
  return ml_collections.ConfigDict(tree)


def to_dict(config: ml_collections.ConfigDict | Mapping[str, Any]) -> dict[str, Any]:
  """A plain, JSON-ready nested dict of ``config``."""
  if isinstance(config, ml_collections.ConfigDict):
    config = config.to_dict()
  return json.loads(json.dumps(config, sort_keys=True, default=str))


# Fields that may change between a run and its resumption without changing the result:
# how long to train and how often to log or save.
RESUMABLE_FIELDS = ("loop",)


def fingerprint(config: ml_collections.ConfigDict | Mapping[str, Any]) -> dict[str, Any]:
  """The part of a config that must match for a checkpoint to be resumed."""
  tree = to_dict(config)
  for name in RESUMABLE_FIELDS:
    tree.pop(name, None)
  return tree


def fingerprint_hash(config: ml_collections.ConfigDict | Mapping[str, Any]) -> str:
  return hashlib.sha256(
      json.dumps(fingerprint(config), sort_keys=True).encode()).hexdigest()[:16]


def diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
  """Dotted keys whose values differ between two nested dicts (for error messages)."""
  keys = sorted(set(old) | set(new))
  out = []
  for key in keys:
    name = f"{prefix}{key}"
    a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out.extend(diff(a, b, name + "."))
    elif a != b:
      out.append(f"{name}: {a!r} -> {b!r}")
  return out


def stage_config(config: ml_collections.ConfigDict, stage: str, *,
                 groups: tuple[str, ...] | None = None,
                 loop: Mapping[str, Any] | None = None,
                 **extra: Any) -> ml_collections.ConfigDict:
  """The config of one ``train_loop`` stage of a multi-stage method.

  It is what the stage runs with and what its checkpoints fingerprint, so a stage resumes
  exactly when the settings it depends on are unchanged.

  Args:
    config: the method's whole config (with ``seed`` and ``loop``).
    stage: the stage's name (recorded as ``stage``).
    groups: the top-level groups the stage depends on (default: all of them).
    loop: the stage's ``loop`` settings (default: ``config.loop``).
    **extra: further top-level fields.

  Raises:
    KeyError: a named group is missing from ``config``.
  """
  tree = to_dict(config)
  if groups is not None:
    missing = [g for g in groups if g not in tree]
    if missing:
      raise KeyError(f"stage {stage!r}: config has no group(s) {missing}")
    tree = {g: tree[g] for g in groups} | {"seed": tree.get("seed"), "loop": tree.get("loop")}
  if loop is not None:
    tree["loop"] = dict(loop)
  tree["stage"] = stage
  tree.update(extra)
  return ml_collections.ConfigDict(tree)
