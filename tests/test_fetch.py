"""fetch_model against a fake hub served on 127.0.0.1 (the real download code path) and against hand-made caches.

Nothing here reaches the network: the fake server speaks the few hub endpoints huggingface_hub uses
(model info with file metadata, HEAD/GET on resolve URLs with range requests) and can drop or fail a download.
"""
from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from huggingface_hub import constants
from safetensors.numpy import save

from qgpu_min.model import fetch
from qgpu_min.model.fetch import FetchError, fetch_model

REPO = "Qwen/Qwen3.5-2B"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _shard(seed: int, n: int) -> bytes:
    rng = np.random.default_rng(seed)
    return save({f"model.language_model.layers.{seed}.w": rng.standard_normal((n, 64)).astype(np.float32)})


def _repo_files() -> dict[str, bytes]:
    index = {"metadata": {"total_size": 0}, "weight_map": {
        "model.language_model.layers.0.w": "model-00001-of-00002.safetensors",
        "model.language_model.layers.1.w": "model-00002-of-00002.safetensors"}}
    return {
        "config.json": b'{"model_type": "qwen3_5"}',
        "tokenizer.json": b'{"model": {}}',
        "tokenizer_config.json": b"{}",
        "chat_template.jinja": b"{{ messages }}",
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": _shard(0, 300),
        "model-00002-of-00002.safetensors": _shard(1, 500),
        # present in the repository but not needed: must never be requested
        "README.md": b"# readme",
        "vocab.json": b"{}",
        "unused.safetensors": _shard(2, 10),
    }


class FakeHub:
    """A hub with one repository. `cut[name] = n` drops the next full GET after n bytes; `fail[name] = status`
    answers GETs with that status; `size_lie[name] = d` adds d to the size the metadata reports."""

    def __init__(self, files: dict[str, bytes], commit: str = COMMIT, repo: str = REPO) -> None:
        self.files, self.commit, self.repo = files, commit, repo
        self.cut: dict[str, int] = {}
        self.fail: dict[str, int] = {}
        self.size_lie: dict[str, int] = {}
        self.log: list[tuple[str, str, str | None]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

            def do_GET(self) -> None:
                hub._handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def gets(self, name: str) -> list[str | None]:
        """The Range headers of the GETs of one file."""
        return [rng for method, path, rng in self.log if method == "GET" and path.endswith("/" + name)]

    def _known_revision(self, rev: str) -> bool:
        return rev in ("main", self.commit)

    def _handle(self, req: BaseHTTPRequestHandler, head: bool) -> None:
        path = req.path.split("?")[0]
        self.log.append(("HEAD" if head else "GET", path, req.headers.get("Range")))
        api = f"/api/models/{self.repo}/revision/"
        resolve = f"/{self.repo}/resolve/"
        if path.startswith(api):
            rev = path[len(api):]
            if not self._known_revision(rev):
                return self._error(req, 404, "RevisionNotFound")
            return self._json(req, {"id": self.repo, "sha": self.commit, "siblings": [
                self._sibling(name, data) for name, data in self.files.items()]})
        if path.startswith(resolve):
            rev, _, name = path[len(resolve):].partition("/")
            if not self._known_revision(rev):
                return self._error(req, 404, "RevisionNotFound")
            if name not in self.files:
                return self._error(req, 404, "EntryNotFound")
            return self._file(req, name, head)
        return self._error(req, 404, "RepoNotFound")

    def _sibling(self, name: str, data: bytes) -> dict:
        size = len(data) + self.size_lie.get(name, 0)
        entry = {"rfilename": name, "size": size, "blobId": hashlib.sha1(data).hexdigest()}
        if name.endswith(".safetensors"):
            entry["lfs"] = {"size": size, "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
        return entry

    def _file(self, req: BaseHTTPRequestHandler, name: str, head: bool) -> None:
        data = self.files[name]
        if not head and name in self.fail:
            return self._error(req, self.fail[name], "")
        start = 0
        rng = req.headers.get("Range")
        if rng and not head:
            start = int(rng.split("=")[1].split("-")[0])
        req.send_response(206 if start else 200)
        req.send_header("X-Repo-Commit", self.commit)
        etag = hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else hashlib.sha1(data).hexdigest()
        req.send_header("ETag", f'"{etag}"')
        req.send_header("Content-Length", str(len(data) - start))
        if start:
            req.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        req.end_headers()
        if head:
            return
        body = data[start:]
        if not start and name in self.cut:
            body = body[:self.cut.pop(name)]  # the client sees a connection closed mid-body
            req.close_connection = True
        req.wfile.write(body)

    def _json(self, req: BaseHTTPRequestHandler, obj: dict) -> None:
        body = json.dumps(obj).encode()
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def _error(self, req: BaseHTTPRequestHandler, status: int, code: str) -> None:
        req.send_response(status)
        if code:
            req.send_header("X-Error-Code", code)
        req.send_header("Content-Length", "0")
        req.end_headers()


@pytest.fixture
def hub():
    server = FakeHub(_repo_files())
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _online(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


NEEDED = {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
          "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_fetch_downloads_only_needed_files_and_verifies(hub, tmp_path):
    messages: list[str] = []
    snap = fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url, log=messages.append)
    assert snap == tmp_path / "models--Qwen--Qwen3.5-2B" / "snapshots" / COMMIT
    assert {p.name for p in snap.iterdir()} == NEEDED
    for name in NEEDED:
        assert (snap / name).read_bytes() == hub.files[name]
    for unneeded in ("README.md", "vocab.json", "unused.safetensors"):
        assert hub.gets(unneeded) == []
    assert (tmp_path / "models--Qwen--Qwen3.5-2B" / "refs" / "main").read_text() == COMMIT
    assert any("checking sha256 of model-00002-of-00002.safetensors" in m for m in messages)

    # A second online call downloads nothing and re-hashes nothing.
    n_gets = sum(1 for m, _, _ in hub.log if m == "GET")
    messages.clear()
    assert fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url, log=messages.append) == snap
    assert sum(1 for m, _, _ in hub.log if m == "GET") == n_gets + 1  # the model-info call only
    assert not any("checking sha256" in m for m in messages)

    # Offline, by argument or by HF_HUB_OFFLINE, with the server gone.
    hub.close()
    assert fetch_model(REPO, "main", cache_dir=tmp_path, local_files_only=True) == snap
    constants.HF_HUB_OFFLINE = True  # restored by the autouse fixture
    assert fetch_model(REPO, COMMIT, cache_dir=tmp_path) == snap


def test_dropped_connection_resumes_with_a_range_request(hub, tmp_path, monkeypatch):
    # The hub writes whole chunks (10 MB by default): shrink them so a small file resumes mid-way.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1000)
    name = "model-00002-of-00002.safetensors"
    hub.cut[name] = 5000
    snap = fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url)
    assert (snap / name).read_bytes() == hub.files[name]
    assert hub.gets(name) == [None, "bytes=5000-"]


def test_failed_download_is_never_taken_as_complete(hub, tmp_path):
    name = "model-00002-of-00002.safetensors"
    hub.fail[name] = 500
    with pytest.raises(FetchError, match=name):
        fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url)
    storage = tmp_path / "models--Qwen--Qwen3.5-2B"
    snap = storage / "snapshots" / COMMIT
    assert not (snap / name).exists()
    assert not [p for p in (storage / "blobs").iterdir() if "incomplete" in p.name]
    with pytest.raises(FetchError, match=f"incomplete: {name} is missing"):
        fetch_model(REPO, "main", cache_dir=tmp_path, local_files_only=True)

    # The rerun fetches only what is missing.
    del hub.fail[name]
    before = len(hub.gets("config.json")), len(hub.gets("model-00001-of-00002.safetensors"))
    assert fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url) == snap
    assert (len(hub.gets("config.json")), len(hub.gets("model-00001-of-00002.safetensors"))) == before
    assert (snap / name).read_bytes() == hub.files[name]


def test_size_disagreeing_with_repo_metadata_is_an_error(hub, tmp_path):
    hub.size_lie["tokenizer.json"] = 3
    n = len(hub.files["tokenizer.json"])
    with pytest.raises(FetchError, match=f"tokenizer.json of .* has {n} bytes, expected {n + 3}"):
        fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url)


def test_corruption_after_verification_is_caught_offline(hub, tmp_path):
    name = "model-00001-of-00002.safetensors"
    snap = fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url)
    blob = (snap / name).resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # same size, different content, newer mtime
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    with pytest.raises(FetchError, match=f"{name} of .* has sha256 .* expected .* delete {blob} and fetch again"):
        fetch_model(REPO, "main", cache_dir=tmp_path, local_files_only=True)
    # Following the advice repairs the cache.
    blob.unlink()
    assert fetch_model(REPO, "main", cache_dir=tmp_path, endpoint=hub.url) == snap
    assert (snap / name).read_bytes() == hub.files[name]


def test_pinned_revision_must_match_the_reference_hashes(tmp_path, monkeypatch):
    server = FakeHub(_repo_files(), commit=fetch.PINNED_REVISION)
    try:
        with pytest.raises(FetchError, match="config.json of .* has sha256 .* expected ed1c1723"):
            fetch_model(cache_dir=tmp_path, endpoint=server.url)
        # With the reference hash of this (fake) config the same fetch passes.
        good = {"config.json": hashlib.sha256(server.files["config.json"]).hexdigest()}
        monkeypatch.setitem(fetch.KNOWN_SHA256, (REPO, fetch.PINNED_REVISION), good)
        snap = fetch_model(cache_dir=tmp_path, endpoint=server.url)
        assert snap.name == fetch.PINNED_REVISION
    finally:
        server.close()


def test_unknown_repository_and_revision(hub, tmp_path):
    with pytest.raises(FetchError, match="repository 'Qwen/Nope' not found"):
        fetch_model("Qwen/Nope", "main", cache_dir=tmp_path, endpoint=hub.url)
    with pytest.raises(FetchError, match="revision 'v9' not found"):
        fetch_model(REPO, "v9", cache_dir=tmp_path, endpoint=hub.url)
    assert not (tmp_path / "models--Qwen--Qwen3.5-2B" / "snapshots").exists()


def _prefilled_cache(root: Path, files: dict[str, bytes], commit: str = COMMIT) -> Path:
    """The hub's cache layout, written by hand: blobs, snapshot links, refs/main."""
    storage = root / "models--Qwen--Qwen3.5-2B"
    snap = storage / "snapshots" / commit
    (storage / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(commit)
    for name, data in files.items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snap


def test_prefilled_cache_offline(tmp_path):
    files = {n: d for n, d in _repo_files().items() if n in NEEDED}
    snap = _prefilled_cache(tmp_path / "ok", files)
    assert fetch_model(REPO, "main", cache_dir=tmp_path / "ok", local_files_only=True) == snap
    with pytest.raises(FetchError, match=r"not in the cache .* \(no refs/v2\)"):
        fetch_model(REPO, "v2", cache_dir=tmp_path / "ok", local_files_only=True)

    no_tok = {n: d for n, d in files.items() if n != "tokenizer.json"}
    _prefilled_cache(tmp_path / "no_tok", no_tok)
    with pytest.raises(FetchError, match="tokenizer.json is missing"):
        fetch_model(REPO, "main", cache_dir=tmp_path / "no_tok", local_files_only=True)

    name = "model-00002-of-00002.safetensors"
    truncated = {**files, name: files[name][:-100]}
    _prefilled_cache(tmp_path / "trunc", truncated)
    with pytest.raises(FetchError, match=f"{name} of .* is truncated or corrupt \\(tensor .* ends at byte .* but the file has only"):
        fetch_model(REPO, "main", cache_dir=tmp_path / "trunc", local_files_only=True)


def test_names_that_would_leave_the_cache_are_refused(tmp_path):
    """Repository ids, revisions and refs files become paths in the cache: none may point out of it."""
    for repo in ("../x", "a/b/c", "a/..", "", "a\x00b"):
        with pytest.raises(FetchError, match="is not of the form org/name"):
            fetch_model(repo, "main", cache_dir=tmp_path, local_files_only=True)
    for revision in ("../../etc", "a/../b", "/abs", "", "a//b", "x\x00"):
        with pytest.raises(FetchError, match="is not a commit, branch or tag name"):
            fetch_model(REPO, revision, cache_dir=tmp_path, local_files_only=True)
    files = {n: d for n, d in _repo_files().items() if n in NEEDED}
    _prefilled_cache(tmp_path / "c", files)
    ref = tmp_path / "c" / "models--Qwen--Qwen3.5-2B" / "refs" / "main"
    ref.write_text("../../../../outside")
    with pytest.raises(FetchError, match=r"refs/main does not hold a commit hash \(found '\.\./\.\./"):
        fetch_model(REPO, "main", cache_dir=tmp_path / "c", local_files_only=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]   # nothing written beside the cache


def test_fetch_command(hub, tmp_path):
    from qgpu_min.cli import main

    result = CliRunner().invoke(main, ["fetch", "--revision", "main", "--cache-dir", str(tmp_path),
                                       "--endpoint", hub.url, "--repo", REPO])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == str(tmp_path / "models--Qwen--Qwen3.5-2B" / "snapshots" / COMMIT)
    bad = CliRunner().invoke(main, ["fetch", "--revision", "v9", "--cache-dir", str(tmp_path), "--endpoint", hub.url])
    assert bad.exit_code != 0
    assert "revision 'v9' not found" in bad.output
