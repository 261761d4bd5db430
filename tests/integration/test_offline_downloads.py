"""Every dataset with a download path, downloaded where it cannot be: one line that says why and where to place the
files, and nothing left behind. Independent of this machine's network: torchvision's URLs are pointed at a port that
refuses (``127.0.0.1:9``) or at a server of this test's own."""

from __future__ import annotations

import hashlib
import http.server
import socket
import subprocess
import sys
import threading
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import REPO

from lightning_sfl.data.datasets import load_dataset
from lightning_sfl.data.download import failure_reason
from lightning_sfl.errors import DatasetNotFoundError

#: The datasets ``--data.download true`` fetches (``cinic10`` cannot be downloaded; the others need no files).
DOWNLOADABLE = ("cifar10", "cifar100", "fashion_mnist", "svhn", "imagenette")
REFUSING = "http://127.0.0.1:9"  # the discard port: nothing listens there


def _point_downloads_at(monkeypatch, base: str, md5s: dict[str, str] | None = None) -> None:
    """torchvision's URLs of every downloadable dataset under ``base`` (their file names kept); ``md5s``: the sums to
    expect, by file name (else torchvision's own)."""
    from torchvision import datasets

    md5s = md5s or {}
    for cls in (datasets.CIFAR10, datasets.CIFAR100):
        monkeypatch.setattr(cls, "url", f"{base}/{cls.filename}")
    monkeypatch.setattr(datasets.FashionMNIST, "mirrors", [f"{base}/"])
    split_list = {k: [f"{base}/{f}", f, md5s.get(f, md5)] for k, (_, f, md5) in datasets.SVHN.split_list.items()}
    monkeypatch.setattr(datasets.SVHN, "split_list", split_list)
    url, md5 = datasets.Imagenette._ARCHIVES["160px"]
    monkeypatch.setitem(datasets.Imagenette._ARCHIVES, "160px", (f"{base}/{Path(url).name}", md5))


class _Server:
    """A local HTTP server answering ``files`` (name -> bytes) and ``404`` for anything else; ``garbage``: every name
    is answered with bytes that are no dataset."""

    def __init__(self, files: dict[str, bytes] | None = None, garbage: bool = False) -> None:
        served = files or {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = b"not a dataset" * 100 if garbage else served.get(self.path.rsplit("/", 1)[-1])
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.mark.parametrize("name", DOWNLOADABLE)
def test_a_refused_download_is_one_line_naming_where_files_go_and_creates_nothing(tmp_path, name, monkeypatch):
    """Into a root that does not exist yet: the folders made for it are removed again."""
    _point_downloads_at(monkeypatch, REFUSING)
    root = tmp_path / "new" / "data"
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, root=root, download=True)
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith(f"downloading {name} failed: the server refused the connection; download "), message
    assert f"in {root}" in message and REFUSING in message  # where the files go, and what to fetch
    assert _listing(tmp_path) == [], _listing(tmp_path)


@pytest.mark.parametrize("name", DOWNLOADABLE)
def test_a_download_that_fails_its_integrity_check_leaves_no_half_written_archive(tmp_path, name, monkeypatch):
    """A server that answers with bytes that are no dataset (wrong md5): the file it sent is removed; a root that
    existed keeps exactly what it held."""
    server = _Server(garbage=True)
    _point_downloads_at(monkeypatch, server.url)
    (tmp_path / "keep.txt").write_text("mine")
    try:
        with pytest.raises(DatasetNotFoundError) as err:
            load_dataset(name, root=tmp_path, download=True)
    finally:
        server.close()
    message = str(err.value)
    assert "\n" not in message and message.startswith(
        f"downloading {name} failed: the downloaded file failed its integrity check (md5); download "
    ), message
    assert _listing(tmp_path) == ["keep.txt"]


def test_a_server_that_lacks_the_file_is_named_as_such(tmp_path, monkeypatch):
    server = _Server()  # 404 for everything
    _point_downloads_at(monkeypatch, server.url)
    try:
        with pytest.raises(DatasetNotFoundError, match=r"^downloading svhn failed: the server answered HTTP 404 "):
            load_dataset("svhn", root=tmp_path / "data", download=True)
    finally:
        server.close()
    assert _listing(tmp_path) == []


def test_a_download_that_succeeds_lands_in_root_and_nothing_else_remains(tmp_path, monkeypatch):
    """SVHN's two files from the local server (their md5 sums given): read back as written, no download folder left."""
    import scipy.io

    rng = np.random.default_rng(0)
    files, images = {}, {}
    for split, n in (("train", 3), ("test", 2)):
        images[split] = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        path = tmp_path / f"{split}_32x32.mat"
        scipy.io.savemat(path, {"X": images[split].transpose(2, 3, 1, 0), "y": np.full((n, 1), 10, np.uint8)})
        files[path.name] = path.read_bytes()
        path.unlink()
    server = _Server(files)
    _point_downloads_at(monkeypatch, server.url, {k: hashlib.md5(v).hexdigest() for k, v in files.items()})
    root = tmp_path / "data"
    try:
        ds = load_dataset("svhn", root=root, download=True)
    finally:
        server.close()
    assert torch.equal(ds.train_x, torch.from_numpy(images["train"])) and ds.test_y.tolist() == [0, 0]
    assert _listing(root) == ["test_32x32.mat", "train_32x32.mat"]


def test_an_archive_placed_in_root_is_used_and_not_fetched_again(tmp_path, monkeypatch):
    """Imagenette's archive (two classes, one image each; its md5 given) placed in root, the URL refusing: the download
    extracts it without fetching; root keeps the archive and gains the folder, and no download folder remains."""
    import tarfile

    from PIL import Image
    from torchvision import datasets

    tree = tmp_path / "tree"
    for split in ("train", "val"):
        for wnid in ("n01440764", "n02102040"):  # tench, English springer
            (tree / "imagenette2-160" / split / wnid).mkdir(parents=True)
            Image.new("RGB", (12, 10), (200, 30, 60)).save(tree / "imagenette2-160" / split / wnid / "a.JPEG")
    root = tmp_path / "data"
    root.mkdir()
    with tarfile.open(root / "imagenette2-160.tgz", "w:gz") as tar:
        tar.add(tree / "imagenette2-160", arcname="imagenette2-160")
    md5 = hashlib.md5((root / "imagenette2-160.tgz").read_bytes()).hexdigest()
    monkeypatch.setitem(datasets.Imagenette._ARCHIVES, "160px", (f"{REFUSING}/imagenette2-160.tgz", md5))
    ds = load_dataset("imagenette", root=root, download=True, image_size=8)
    assert ds.train_y.tolist() == [0, 1] and ds.test_x.shape == (2, 3, 8, 8)
    assert sorted(p.name for p in root.iterdir()) == ["imagenette2-160", "imagenette2-160.tgz"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (urllib.error.URLError(socket.gaierror(-2, "Name or service not known")), "no network"),
        (urllib.error.URLError(OSError(101, "Network is unreachable")), "no network"),
        (urllib.error.URLError(TimeoutError("timed out")), "the connection timed out"),
        (
            RuntimeError(
                "Error downloading x.gz:\nTried http://h/, got:\n<urlopen error [Errno -3] Temporary failure in "
                "name resolution>\n"
            ),
            "no network",
        ),  # fmt: skip
        (RuntimeError("File not found or corrupted."), "the downloaded file failed its integrity check"),
        (PermissionError(13, "Permission denied", "/data/x.tar.gz"), "no permission to write in /data"),
    ],
)
def test_the_reason_is_said_in_a_few_words(error, reason):
    assert failure_reason(error).startswith(reason)


def test_the_command_line_says_it_in_one_error_line(tmp_path):
    """``fit --data.dataset cifar10 --data.download true`` where the download cannot succeed: exit code 2, one line."""
    code = (
        "import sys, torchvision\n"
        f"torchvision.datasets.CIFAR10.url = {REFUSING + '/cifar-10-python.tar.gz'!r}\n"
        "from lightning_sfl.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    args = ["fit", "--config", str(REPO / "configs/digits/scala.yaml"), "--data.dataset", "cifar10"]
    args += ["--data.root", str(tmp_path / "x"), "--data.download", "true", "--trainer.logger", "false"]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.startswith("error: downloading cifar10 failed: the server refused the connection; download ")
    assert out.stderr.count("\n") == 1, out.stderr
    assert not (tmp_path / "x").exists()
