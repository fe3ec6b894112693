"""The worked example of ``core/README.md`` runs as written, and what it claims holds."""

import json
import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "jaxlib_papers" / "core" / "README.md"


def example_source() -> str:
  text = README.read_text()
  section = text[text.index("### A worked example"):]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_worked_example_is_short_runs_and_fits(tmp_path, capsys):
  source = example_source()
  assert len(source.splitlines()) < 100
  namespace = {"__name__": "readme_example"}
  exec(compile(source, str(README), "exec"), namespace)  # pylint: disable=exec-used
  result = namespace["result"]
  # Three seeds of a 32-unit MLP fit sin(2x) on [-2, 2]: the EMA parameters after the
  # fine-tune reach a small error on every seed (the data's variance is ~0.5).
  assert len(result.test_mse) == 3 and max(result.test_mse) < 1e-2
  assert "[example/fit] step 400/400" in capsys.readouterr().out
  # With a workdir: results.json without the in-memory params, and a rerun resumes both
  # finished stages (no step trained again) to the same numbers.
  first = namespace["run"](namespace["config"], tmp_path)
  saved = json.loads((tmp_path / "results.json").read_text())
  assert sorted(saved) == ["seconds", "summary", "test_mse"]
  again = namespace["run"](namespace["config"], tmp_path)
  np.testing.assert_array_equal(first.test_mse, again.test_mse)
  rows = (tmp_path / "fit" / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(r)["step"] for r in rows] == list(range(10, 401, 10))  # one per call
