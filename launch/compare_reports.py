r"""Diffs two ``report.json`` files of ``launch.reproduce`` claim by claim.

  python -m launch.compare_reports reports/before/report.json reports/after/report.json
  python -m launch.compare_reports A B --only=ocm,ruot --rtol=0   # exact, two checks

A claim is matched by its check and its text with the numbers masked (a threshold or a
measured value inside the claim text does not break the match); then its ``holds`` and
every number in ``ours`` (and in the claim text) are compared, in order. Prints one line per
claim that changed (held -> missed, a number that moved, a claim only one report has) and
a totals line; exits 1 when any claim changed beyond ``--rtol``, 0 otherwise. ``--only``
restricts both reports to some checks (a subset run against a whole-job report).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import sys
from collections.abc import Sequence

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")


def claim_key(row: dict) -> tuple[str, str]:
  """(check, claim text with every number replaced by #)."""
  return row["check"], _NUMBER.sub("#", str(row["claim"]))


def numbers(text: str) -> list[float]:
  return [float(x) for x in _NUMBER.findall(str(text))]


def _close(a: float, b: float, rtol: float) -> bool:
  if math.isnan(a) and math.isnan(b):
    return True
  return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))


def compare(before: Sequence[dict], after: Sequence[dict], *, rtol: float = 0.0,
            only: Sequence[str] = ()) -> list[str]:
  """The differences between two reports' rows, one readable line each."""
  keep = lambda rows: [r for r in rows if not only or r["check"].split("/")[0] in only
                       or r["check"] in only]
  index_a, index_b = {}, {}
  for rows, index in ((keep(before), index_a), (keep(after), index_b)):
    for r in rows:
      key = claim_key(r)
      index.setdefault(key, []).append(r)
  lines = []
  for key in list(index_a) + [k for k in index_b if k not in index_a]:
    rows_a, rows_b = index_a.get(key, []), index_b.get(key, [])
    if len(rows_a) != len(rows_b):
      lines.append(f"{key[0]}: {key[1]!r}: {len(rows_a)} row(s) before, {len(rows_b)} after")
      continue
    for a, b in zip(rows_a, rows_b):
      if a["holds"] != b["holds"]:
        lines.append(f"{key[0]}: {a['claim']!r}: holds {a['holds']} -> {b['holds']}")
      na = numbers(a["ours"]) + numbers(a["claim"])
      nb = numbers(b["ours"]) + numbers(b["claim"])
      if len(na) != len(nb) or not all(_close(x, y, rtol) for x, y in zip(na, nb)):
        lines.append(f"{key[0]}: {a['claim']!r}: ours {a['ours']!r} -> {b['ours']!r}")
  return lines


def main(argv: Sequence[str] | None = None) -> int:
  # argparse, not absl flags: this module is imported beside launch.reproduce (tests),
  # whose --only would clash with ours in absl's one global flag registry.
  parser = argparse.ArgumentParser(prog="python -m launch.compare_reports",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("before", type=pathlib.Path)
  parser.add_argument("after", type=pathlib.Path)
  parser.add_argument("--rtol", type=float, default=0.0,
                      help="relative tolerance of a number (0: exact text)")
  parser.add_argument("--only", type=lambda s: [x for x in s.split(",") if x], default=[],
                      help="compare only these checks, comma-separated (default: all)")
  args = parser.parse_args(argv)
  before, after = (json.loads(p.read_text()) for p in (args.before, args.after))
  lines = compare(before, after, rtol=args.rtol, only=args.only)
  print("\n".join(lines))
  count = lambda rows: len([r for r in rows if not args.only
                            or r["check"].split("/")[0] in args.only])
  print(f"[compare] {len(lines)} difference(s) over {count(before)} / {count(after)} "
        f"claims (rtol {args.rtol:g})")
  return 1 if lines else 0


if __name__ == "__main__":
  sys.exit(main())
