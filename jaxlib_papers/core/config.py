"""Config presets shared by every method: ``smoke`` | ``cpu`` | ``full``.

* ``smoke``: seconds on a CPU; what tests, CI and the Colab demos run.
* ``cpu``: the reproduction size, minutes on two CPU cores (``launch.reproduce``).
* ``full``: the paper's size, for a GPU or TPU.

A paper's ``configs/default.py`` calls :func:`make_config` with its base config and the
per-preset overrides, so every preset is the base plus a short, readable diff.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import pathlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

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
    constraints: Mapping[str, "Constraint"] | None = None,
) -> ml_collections.ConfigDict:
  """Builds the config of ``preset`` from a base and per-preset dotted overrides.

  Args:
    preset: one of :data:`PRESETS`.
    base: nested dict, the complete config (every key a preset may change must exist).
    overrides: ``{preset: {"loop.num_steps": 100, ...}}``; presets may be missing.
    constraints: ``{dotted key: Constraint}`` checked on the built config (:func:`validate`).

  Returns:
    A ConfigDict with an extra top-level ``preset`` field.

  Raises:
    ValueError: unknown preset.
    KeyError: an override names a key the base config lacks (a typo would otherwise
      silently add a new field).
    ValueError: a value breaks its constraint.
  """
  check_preset(preset)
  tree = copy.deepcopy(dict(base))
  for dotted, value in (overrides or {}).get(preset, {}).items():
    _set_dotted(tree, dotted, value)
  tree["preset"] = preset
  config = ml_collections.ConfigDict(tree)
  return validate(config, constraints) if constraints else config


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


# --- Constraints: every config declares what its keys allow, checked before any compile. ---


class Constraint(NamedTuple):
  """What a config key allows: ``test(value) -> bool`` and the words for the error."""
  test: Callable[[Any], bool]
  expected: str

  def __call__(self, value: Any) -> bool:
    try:
      return bool(self.test(value))
    except (TypeError, ValueError):
      return False


def _number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
      value)


def positive() -> Constraint:
  """A finite number > 0 (learning rates, step sizes, temperatures, widths)."""
  return Constraint(lambda v: _number(v) and v > 0, "a number > 0")


def non_negative() -> Constraint:
  return Constraint(lambda v: _number(v) and v >= 0, "a number >= 0")


def at_least(minimum: int) -> Constraint:
  """An integer >= ``minimum`` (step counts, batch sizes, seeds)."""
  return Constraint(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum,
                    f"an integer >= {minimum}")


def in_range(low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> Constraint:
  """A number in ``[low, high]`` (either end open on request)."""
  def test(v):
    return (_number(v) and (v > low if low_open else v >= low)
            and (v < high if high_open else v <= high))
  return Constraint(test, f"a number in {'(' if low_open else '['}{low}, {high}"
                          f"{')' if high_open else ']'}")


def one_of(*choices: Any) -> Constraint:
  return Constraint(lambda v: v in choices, f"one of {', '.join(map(repr, choices))}")


def each(inner: Constraint, *, non_empty: bool = True) -> Constraint:
  """A list or tuple whose every item meets ``inner``."""
  def test(v):
    return (isinstance(v, (list, tuple)) and (len(v) > 0 or not non_empty)
            and all(inner(x) for x in v))
  return Constraint(test, f"a {'non-empty ' if non_empty else ''}list of {inner.expected}")


def existing_file(*, optional: bool = True) -> Constraint:
  """A path to an existing file (None or "" allowed when ``optional``)."""
  def test(v):
    if v in (None, ""):
      return optional
    return pathlib.Path(str(v)).expanduser().is_file()
  return Constraint(test, "an existing file" + (" (or empty)" if optional else ""))


def flat_keys(config: ml_collections.ConfigDict | Mapping[str, Any], prefix: str = ""
              ) -> list[str]:
  """Every dotted leaf key of ``config`` (groups recursed into)."""
  out = []
  for key, value in (config.items() if hasattr(config, "items") else ()):
    name = f"{prefix}{key}"
    if isinstance(value, (Mapping, ml_collections.ConfigDict)):
      out.extend(flat_keys(value, name + "."))
    else:
      out.append(name)
  return out


def closest_keys(config: ml_collections.ConfigDict, key: str, count: int = 5) -> list[str]:
  """The valid dotted keys closest to ``key`` (for an 'unknown key' message): close as a
  whole, or with a close last part (``optim.lr`` for ``lr``)."""
  keys = flat_keys(config)
  leaf = key.rsplit(".", 1)[-1]
  close = difflib.get_close_matches(key, keys, n=count, cutoff=0.5)
  close += [k for k in keys if difflib.SequenceMatcher(
      None, k.rsplit(".", 1)[-1], leaf).ratio() >= 0.7 and k not in close]
  return close[:count]


def _get_dotted(config: Any, dotted: str) -> Any:
  node = config
  for part in dotted.split("."):
    if not hasattr(node, "keys") or part not in node:
      raise KeyError(dotted)
    node = node[part]
  return node


def validate(config: ml_collections.ConfigDict,
             constraints: Mapping[str, Constraint]) -> ml_collections.ConfigDict:
  """Checks ``config`` against ``constraints`` (``{"optim.lr": positive(), ...}``).

  Called when a config is built (``get_config``) and again by ``train.run`` (after a
  launcher's ``--config.key=value`` overrides), before anything compiles.

  Returns:
    ``config`` unchanged.

  Raises:
    ValueError: one line per key whose value is not allowed: the key, the value and what
      is allowed (all of them at once).
    KeyError: a constraint names a key the config lacks (a typo in the declaration).
  """
  problems = []
  for key, constraint in constraints.items():
    try:
      value = _get_dotted(config, key)
    except KeyError:
      raise KeyError(f"constraint on config.{key}: no such key; closest: "
                     f"{closest_keys(config, key)}") from None
    if not constraint(value):
      problems.append(f"config.{key} = {value!r}: expected {constraint.expected}")
  if problems:
    raise ValueError("invalid config value(s):\n  " + "\n  ".join(problems))
  return config
