"""Download Qwen/Qwen3.5-2B (or another Qwen3.5 repository) into the Hugging Face hub cache, verified.

Only the files the runtime needs are fetched: config.json, the weight index and the shards it names (or a
lone model.safetensors), the tokenizer and its config, and the generation config and chat template when the
repository has them. Every file is checked against the repository's metadata (size, and the LFS sha256 where
the hub publishes one); at the pinned revision the weights and config.json must also match the sha256 values
recorded in the reference, and every safetensors file must hold exactly the bytes its header promises.

Downloads go through `huggingface_hub.hf_hub_download`, so the cache layout is the hub's own
(`models--Org--Name/{blobs,snapshots,refs}`) and other tools find the files. The hub writes each file under a
temporary name and renames it only when complete, so an interrupted download never shows up in the snapshot;
within one run it resumes dropped connections with HTTP range requests, and a rerun skips every finished
file. Which files make up a complete download, with their sizes and hashes, is recorded per commit in
`<cache>/.qgpu-min-verified/`, so an offline call knows when a snapshot is partial.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from ..files import read_json, write_text_atomic
from .errors import CheckpointError
from .safetensors_io import INDEX_NAME, SINGLE_NAME, read_header, read_index

DEFAULT_REPO = "Qwen/Qwen3.5-2B"
PINNED_REVISION = "15852e8c16360a2fea060d615a32b45270f8a8fc"

# sha256 of files at a known (repo, commit), from shared/reference/qwen35-2b.md; checked on every fetch of it.
KNOWN_SHA256: dict[tuple[str, str], dict[str, str]] = {
    (DEFAULT_REPO, PINNED_REVISION): {
        "model.safetensors-00001-of-00001.safetensors":
            "aa33250c4fc64891ddfaba3a314fd9542ea371843c387178b425fbcc5ed680b1",
        "config.json": "ed1c1723241f23f7f4e23430759cbd7dcfb4103cbdfe052bfe7626b57c2615b4",
    },
}

REQUIRED_FILES = ("config.json", "tokenizer.json")
OPTIONAL_FILES = ("tokenizer_config.json", "generation_config.json", "chat_template.jinja", "chat_template.json")
STAMP_DIR = ".qgpu-min-verified"

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# What the hub accepts: `name` or `org/name` of word characters, dots and dashes; branch and tag names as
# git allows them (no `..`, no absolute or empty part). Both become paths in the cache, so nothing else passes.
_REPO_RE = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
_REVISION_PART_RE = re.compile(r"^[\w.+@-]+$")


def _check_names(repo_id: str, revision: str) -> None:
    if not _REPO_RE.match(repo_id) or ".." in repo_id:
        raise FetchError(f"repository id {repo_id!r:.80} is not of the form org/name")
    parts = revision.split("/")
    if not all(_REVISION_PART_RE.match(p) and p not in (".", "..") for p in parts) or ".." in revision:
        raise FetchError(f"revision {revision!r:.80} is not a commit, branch or tag name")
_HASH_CHUNK = 16 << 20

Log = Callable[[str], None]


class FetchError(CheckpointError):
    """The model could not be fetched, or what was fetched (or cached) is incomplete or corrupt."""


@dataclass(frozen=True)
class FileRecord:
    """What a complete, verified copy of one repository file looks like."""

    size: int
    sha256: str | None  # None when neither the hub nor the reference publishes one (small git files)


# file name -> (its record, the mtime_ns of the file when it was last verified)
Stamp = dict[str, tuple[FileRecord, int]]


def fetch_model(
    repo_id: str = DEFAULT_REPO,
    revision: str = PINNED_REVISION,
    cache_dir: str | Path | None = None,
    local_files_only: bool = False,
    endpoint: str | None = None,
    log: Log | None = None,
) -> Path:
    """Download (or find in the cache) the files the runtime needs; return the verified snapshot folder.

    `local_files_only` (or HF_HUB_OFFLINE=1) never touches the network: the cached snapshot must be complete.
    Raises FetchError naming the repository, revision and file on any failure or mismatch.
    """
    # huggingface_hub costs ~0.4 s to import: only a fetch pays it, not every start of the CLI
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    _check_names(repo_id, revision)
    cache = Path(cache_dir).expanduser().resolve() if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    say = log or (lambda _msg: None)
    if local_files_only or constants.is_offline_mode():
        return _from_cache(repo_id, revision, cache, say)
    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
    except RepositoryNotFoundError as e:
        raise FetchError(f"repository {repo_id!r} not found on the hub (or it is private/gated)") from e
    except RevisionNotFoundError as e:
        raise FetchError(f"revision {revision!r} not found in {repo_id!r}") from e
    except Exception as e:  # any transport failure (the hub's HTTP stack differs across versions): try the cache
        say(f"the hub cannot be reached ({type(e).__name__}: {e}); using the cached copy")
        try:
            return _from_cache(repo_id, revision, cache, say)
        except FetchError as cached_error:
            raise FetchError(f"{cached_error} (and the hub cannot be reached: {e})") from e
    if info.sha is None or not _COMMIT_RE.match(info.sha):
        raise FetchError(f"the hub returned no commit hash for {repo_id}@{revision} (got {info.sha!r:.60})")
    if revision != info.sha:  # so that an offline call can resolve the branch or tag name later
        write_text_atomic(cache / _repo_folder(repo_id) / "refs" / revision, info.sha)
    return _download(repo_id, info.sha, info.siblings or [], cache, endpoint, say)


def _download(repo_id: str, commit: str, siblings: list, cache: Path, endpoint: str | None, say: Log) -> Path:
    from huggingface_hub import hf_hub_download

    remote = {s.rfilename: _remote_record(s) for s in siblings}
    known = KNOWN_SHA256.get((repo_id, commit), {})
    for name in REQUIRED_FILES:
        if name not in remote:
            raise FetchError(f"{repo_id}@{commit} has no {name}")
    small = [n for n in (*REQUIRED_FILES, *OPTIONAL_FILES, INDEX_NAME) if n in remote]
    expected: dict[str, FileRecord] = {}

    def get(name: str) -> Path:
        record = FileRecord(remote[name].size, known.get(name) or remote[name].sha256)
        say(f"{name}: {_human(record.size)}")
        try:
            path = Path(hf_hub_download(repo_id, name, revision=commit, cache_dir=cache, endpoint=endpoint))
        except Exception as e:  # network, HTTP or disk: name the file, keep what is complete
            raise FetchError(
                f"downloading {name} of {repo_id}@{commit} failed: {e}. Files already complete are kept; "
                "run the fetch again to continue."
            ) from e
        expected[name] = record
        return path

    snapshot = get("config.json").parent
    for name in small[1:]:
        get(name)
    for name in _weight_files(snapshot, set(remote), f"{repo_id}@{commit}"):
        get(name)
    _verify(snapshot, expected, f"{repo_id}@{commit}", stamp=_read_stamp(cache, repo_id, commit), say=say)
    _write_stamp(cache, repo_id, commit, snapshot, expected)
    say(f"verified {len(expected)} files in {snapshot}")
    return snapshot


def _from_cache(repo_id: str, revision: str, cache: Path, say: Log) -> Path:
    storage = cache / _repo_folder(repo_id)
    commit = revision
    if not _COMMIT_RE.match(revision):
        ref = storage / "refs" / revision
        if not ref.is_file():
            raise FetchError(f"{repo_id}@{revision} is not in the cache {cache} (no refs/{revision}); fetch it online")
        commit = ref.read_text(errors="replace").strip()
        if not _COMMIT_RE.match(commit):   # it names a folder below: never a path out of the cache
            raise FetchError(f"{ref} does not hold a commit hash (found {commit!r:.60}); delete it and fetch online")
    snapshot = storage / "snapshots" / commit
    where = f"{repo_id}@{commit}"
    if not snapshot.is_dir():
        raise FetchError(f"{where} is not in the cache {cache}; fetch it online first")
    stamp = _read_stamp(cache, repo_id, commit)
    if stamp is not None:
        expected = {name: record for name, (record, _mtime) in stamp.items()}
    else:
        # Nothing records what a complete download holds: require the files the runtime cannot do without,
        # and let the safetensors headers and the known hashes vouch for the weights.
        present = {p.name for p in snapshot.iterdir()}
        names = [n for n in (*REQUIRED_FILES, *OPTIONAL_FILES, INDEX_NAME) if n in present or n in REQUIRED_FILES]
        names += _weight_files(snapshot, None, where)
        known = KNOWN_SHA256.get((repo_id, commit), {})
        expected = {n: FileRecord(_size_or_missing(snapshot, n, where), known.get(n)) for n in names}
    _verify(snapshot, expected, where, stamp=stamp, say=say)
    _write_stamp(cache, repo_id, commit, snapshot, expected)
    say(f"using the cached, verified copy in {snapshot}")
    return snapshot


def _weight_files(snapshot: Path, available: set[str] | None, where: str) -> list[str]:
    """The safetensors files the runtime reads: the shards named by the index, else model.safetensors.

    `available` is the repository's file list when fetching online; offline (None) every named shard is
    required and a missing one is reported as an incomplete snapshot by the caller.
    """
    if (snapshot / INDEX_NAME).exists():
        try:
            shards = sorted(set(read_index(snapshot).values()))
        except CheckpointError as e:
            raise FetchError(f"{INDEX_NAME} of {where} is not a valid index ({e})") from e
        missing = [s for s in shards if available is not None and s not in available]
        if missing:
            raise FetchError(f"{INDEX_NAME} of {where} names shards that are not in the repository: {missing}")
        return shards
    if available is None or SINGLE_NAME in available:
        return [SINGLE_NAME]
    raise FetchError(f"{where} has neither {INDEX_NAME} nor {SINGLE_NAME}")


def _verify(snapshot: Path, expected: dict[str, FileRecord], where: str, stamp: Stamp | None, say: Log) -> None:
    for name, record in expected.items():
        path = snapshot / name
        size = _size_or_missing(snapshot, name, where)
        if size != record.size:
            raise FetchError(f"{name} of {where} has {size} bytes, expected {record.size}: the file is incomplete "
                             f"or corrupt; delete {path.resolve()} and fetch again")
        if name.endswith(".safetensors"):
            _check_safetensors_length(path, size, where)
        if record.sha256 is None:
            continue
        if stamp is not None and stamp.get(name) == (record, path.stat().st_mtime_ns):
            continue  # hashed on an earlier call and the blob has not been touched since
        say(f"checking sha256 of {name}")
        digest = _sha256(path)
        if digest != record.sha256:
            raise FetchError(f"{name} of {where} has sha256 {digest}, expected {record.sha256}: the file is corrupt; "
                             f"delete {path.resolve()} and fetch again")


def _check_safetensors_length(path: Path, size: int, where: str) -> None:
    """The header (checked as the runtime checks it) names every tensor's byte range: they must tile the
    file to its end."""
    try:
        read_header(path)
    except CheckpointError as e:
        why = str(e).removeprefix(f"{path}: ")
        raise FetchError(f"{path.name} of {where} is truncated or corrupt ({why}); delete {path.resolve()} "
                         f"and fetch again") from e


def _remote_record(sibling) -> FileRecord:
    if sibling.lfs is not None:
        return FileRecord(sibling.lfs.size, sibling.lfs.sha256)
    if sibling.size is None:
        raise FetchError(f"the hub gave no size for {sibling.rfilename}")
    return FileRecord(sibling.size, None)


def _size_or_missing(snapshot: Path, name: str, where: str) -> int:
    path = snapshot / name
    if not path.exists():  # a dangling link counts as missing
        raise FetchError(f"{where} in {snapshot} is incomplete: {name} is missing; fetch it online to complete it")
    return path.stat().st_size


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stamp_path(cache: Path, repo_id: str, commit: str) -> Path:
    return cache / STAMP_DIR / _repo_folder(repo_id) / f"{commit}.json"


def _read_stamp(cache: Path, repo_id: str, commit: str) -> Stamp | None:
    path = _stamp_path(cache, repo_id, commit)
    try:
        files = read_json(path)["files"]
        return {n: (FileRecord(int(r["size"]), r["sha256"]), int(r["mtime_ns"])) for n, r in files.items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise FetchError(f"the verification record {path} is unreadable ({e}); delete it and fetch again") from e


def _write_stamp(cache: Path, repo_id: str, commit: str, snapshot: Path, expected: dict[str, FileRecord]) -> None:
    files = {n: {**asdict(r), "mtime_ns": (snapshot / n).stat().st_mtime_ns} for n, r in expected.items()}
    write_text_atomic(_stamp_path(cache, repo_id, commit), json.dumps({"snapshot": str(snapshot), "files": files}))


def _repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def _human(n: int) -> str:
    return f"{n} B" if n < 1000 else next(
        f"{n / 1000 ** k:.1f} {unit}" for k, unit in ((3, "GB"), (2, "MB"), (1, "kB")) if n >= 1000 ** k)
