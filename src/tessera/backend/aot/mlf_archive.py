"""Model Library Format on disk: written atomically with a manifest, read back with every check.

An export (a .tar, or a folder) holds `SHA256SUMS`: one `sha256sum` line
per other file. Writing is atomic: a tarball is staged and renamed over the
target; a new folder is staged whole and renamed; into an existing folder
each file is replaced atomically and the manifest is written last, so an
interrupted export leaves a manifest that does not match and is refused.

Reading never trusts the archive: it must be an uncompressed tar (ustar
magic, whole 512-byte blocks) holding only regular files and folders under
relative paths (no `..`, absolute paths, links or devices), every file
listed in the manifest with a matching digest, and a well-formed
`metadata.json`. Anything else is an `ArtifactError` naming the file and
what is wrong; nothing is written outside the destination folder.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from ...errors import ArtifactError
from ...util.checked_json import decode_json
from ...dtype import SUPPORTED_DTYPES
from ...util.atomic import atomic_directory, atomic_write_bytes, atomic_writer
from ...util.digest import manifest_text, parse_manifest, sha256_bytes

MANIFEST = "SHA256SUMS"
METADATA = "metadata.json"
BLOCK = 512


def with_manifest(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """`files` plus the SHA256SUMS that lists them."""
    digests = {name: sha256_bytes(data) for name, data in files.items()}
    return {**files, MANIFEST: manifest_text(digests).encode()}


def write_tar(files: Mapping[str, bytes], path: Path) -> Path:
    """A byte-reproducible tarball: sorted members (the manifest last), mtime 0, uid/gid 0, no user names."""
    with atomic_writer(path) as staged:
        with tarfile.open(staged, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in sorted(files.items(), key=lambda item: (item[0] == MANIFEST, item[0])):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
    return path


def write_folder(files: Mapping[str, bytes], path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise ArtifactError(f"cannot export to {path}: it is a file; give a .tar name or a folder")
    if not path.exists():
        with atomic_directory(path) as staged:
            _write_tree(files, staged)
        return path
    # an existing folder (perhaps holding other files): replace ours one by one, the manifest last
    for name in sorted(files, key=lambda n: n == MANIFEST):
        atomic_write_bytes(path / name, files[name])
    return path


def _write_tree(files: Mapping[str, bytes], root: Path) -> None:
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# ------------------------------------------------------------------ reading
def _member_path(name: str, source: Path) -> str:
    """The normalised relative path of an archive member, refusing anything that could escape."""
    pure = PurePosixPath(name)
    parts = [p for p in pure.parts if p != "."]
    if pure.is_absolute() or not parts or ".." in parts or "\\" in name or "\0" in name:
        raise ArtifactError(f"{source}: member {name[:80]!r} has an unsafe path (absolute, '..' or empty); "
                            "refusing to unpack it")
    return "/".join(parts)


def _read_tar(path: Path) -> dict[str, bytes]:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(BLOCK)
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    if size == 0:
        raise ArtifactError(f"{path} is empty (0 bytes): not a Model Library Format tarball")
    if head[257:262] != b"ustar":
        raise ArtifactError(f"{path} is not a tar archive (no 'ustar' magic at byte 257); expected a Model "
                            "Library Format tarball written by `tessera compile --executor aot`")
    if size % BLOCK or size < 2 * BLOCK:
        raise ArtifactError(f"{path} is {size} bytes, not a whole number of {BLOCK}-byte tar blocks: truncated")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                name = _member_path(member.name, path)
                if member.isdir():
                    continue
                if not member.isreg():
                    raise ArtifactError(f"{path}: member {member.name!r} is a link or special file; a Model Library "
                                        "Format tarball holds only files and folders")
                if name in files:
                    raise ArtifactError(f"{path}: member {name!r} appears twice")
                extracted = tar.extractfile(member)
                if extracted is None:  # not expected for a regular file
                    raise ArtifactError(f"{path}: member {name!r} cannot be read")
                data = extracted.read()
                if len(data) != member.size:
                    raise ArtifactError(f"{path}: member {name!r} is cut short: truncated archive")
                files[name] = data
    except (tarfile.TarError, EOFError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path} is a damaged tar archive ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    return files


def _read_folder(path: Path) -> dict[str, bytes]:
    """SHA256SUMS and the files it lists; other files (e.g. the user's own build) are left out."""
    manifest = path / MANIFEST
    root = path.resolve()
    try:
        if not manifest.is_file():
            return {}  # `_verify` says what is missing
        files = {MANIFEST: manifest.read_bytes()}
        for name in parse_manifest(files[MANIFEST].decode("ascii", "replace"), f"{path}: {MANIFEST}"):
            relative = _member_path(name, path)
            full = path / relative
            if full.is_symlink() or full.resolve() != root / relative or (full.exists() and not full.is_file()):
                raise ArtifactError(f"{path}: {name} is a link or special file; a Model Library Format folder "
                                    "holds only regular files")
            if full.is_file():
                files[name] = full.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    return files


def _verify(files: dict[str, bytes], source: Path) -> None:
    if MANIFEST not in files:
        raise ArtifactError(f"{source} has no {MANIFEST}: the export is truncated or incomplete, or was not "
                            "written by this tessera version; export it again")
    try:
        text = files[MANIFEST].decode("ascii")
    except UnicodeDecodeError:
        raise ArtifactError(f"{source}: {MANIFEST} is not text") from None
    listed = parse_manifest(text, f"{source}: {MANIFEST}")
    missing = sorted(set(listed) - set(files))
    if missing:
        raise ArtifactError(f"{source}: missing {', '.join(missing[:5])} (listed in {MANIFEST}): incomplete export")
    extra = sorted(set(files) - set(listed) - {MANIFEST})
    if extra:
        raise ArtifactError(f"{source}: {', '.join(extra[:5])} not listed in {MANIFEST}; a Model Library Format "
                            "export holds only the files it lists")
    for name in sorted(listed):
        if sha256_bytes(files[name]) != listed[name]:
            raise ArtifactError(f"{source}: {name} does not match its checksum in {MANIFEST}: the file is damaged "
                                "or was edited (if on purpose, update its line: sha256sum)")
    if METADATA not in files:
        raise ArtifactError(f"{source} has no {METADATA}: not a Model Library Format export")
    if not any(n.startswith("codegen/host/src/") for n in files):
        raise ArtifactError(f"{source} has no codegen/host/src/: no generated code to build")


def unpack(path: Path, dest: Path) -> dict:
    """Check the export at `path` (tarball or folder), write its files under `dest`; its metadata."""
    if path.is_dir():
        files = _read_folder(path)
    elif path.is_file():
        files = _read_tar(path)
    else:
        raise ArtifactError(f"no such Model Library Format export: {path}")
    _verify(files, path)
    metadata = parse_metadata(files[METADATA], f"{path}: {METADATA}")
    try:
        _write_tree(files, dest)
    except OSError as exc:  # e.g. both "a" and "a/b" listed
        raise ArtifactError(f"{path}: cannot unpack {exc.filename}: {exc.strerror or exc}") from None
    return metadata


def parse_metadata(data: bytes, source: str) -> dict:
    """metadata.json, checked for every field a run reads."""
    meta = decode_json(data, source)

    def require(ok: bool, what: str) -> None:
        if not ok:
            raise ArtifactError(f"{source}: {what}")

    if not isinstance(meta, dict):
        raise ArtifactError(f"{source}: got a JSON {type(meta).__name__}, expected an object")
    require(isinstance(meta.get("model_name"), str) and meta["model_name"] != "", "expected a 'model_name' string")
    for group in ("inputs", "outputs"):
        tensors = meta.get(group)
        if not isinstance(tensors, list):
            raise ArtifactError(f"{source}: expected '{group}': a list of tensors")
        for k, t in enumerate(tensors):
            where = f"{group}[{k}]"
            require(isinstance(t, dict) and isinstance(t.get("name"), str),
                    f"{where}: expected an object with a 'name'")
            shape = t.get("shape")
            require(isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape),
                    f"{where}.shape: got {str(shape)[:40]}, expected a list of sizes >= 0")
            require(t.get("dtype") in SUPPORTED_DTYPES,
                    f"{where}.dtype: got {str(t.get('dtype'))[:40]!r}, expected one of {', '.join(SUPPORTED_DTYPES)}")
    toolchain = meta.get("toolchain", {})
    require(isinstance(toolchain, dict), "toolchain: expected an object")
    flags = toolchain.get("link_flags", [])
    require(isinstance(flags, list) and all(isinstance(f, str) and f.startswith("-") for f in flags),
            "toolchain.link_flags: expected a list of options such as '-lm'")
    pools = meta.get("pools", [])
    require(isinstance(pools, list), "pools: expected a list")
    for k, pool in enumerate(pools):
        require(isinstance(pool, dict) and type(pool.get("size_bytes")) is int and pool["size_bytes"] >= 0,
                f"pools[{k}]: expected an object with 'size_bytes' >= 0")
    require(type(meta.get("params_bytes", 0)) is int, "params_bytes: expected an integer")
    return meta
