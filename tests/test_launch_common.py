"""launch.common: configs named by package from any folder, unknown keys with the closest."""

import pathlib

import pytest
from absl import app

from launch import common


def test_config_by_package_name_and_by_repository_path_from_any_folder(tmp_path,
                                                                      monkeypatch):
  monkeypatch.chdir(tmp_path)
  installed = common.PACKAGE_ROOT / "minimax" / "configs" / "default.py"
  assert common.resolve_config("minimax:cpu") == f"{installed}:cpu"
  assert common.resolve_config("jaxlib_papers/minimax/configs/default.py:smoke") == (
      f"{installed}:smoke")
  own = tmp_path / "mine.py"
  own.write_text("")
  assert common.resolve_config(f"{own}:x") == f"{own}:x"
  digits = common.PACKAGE_ROOT / "ocm" / "configs" / "digits.py"
  assert common.resolve_config("ocm/digits:smoke") == f"{digits}:smoke"
  with pytest.raises(ValueError, match="no config 'nosuch'; expected one of .*'ocm/digits'"):
    common.resolve_config("nosuch:cpu")


def test_unknown_override_key_names_the_closest_before_any_setup(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  argv = ["launch", "--config=minimax:cpu", "--config.solve.tol=1e-3"]
  resolved = common.check_overrides(argv, "unused")
  assert resolved[1].startswith("--config=/") and pathlib.Path(
      resolved[1].split("=", 1)[1].split(":")[0]).is_file()
  with pytest.raises(app.UsageError, match=r"--config.solve.tl: no such key .*closest: solve.tol"):
    common.check_overrides(["launch", "--config=minimax:cpu", "--config.solve.tl=1"], "")
