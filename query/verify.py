"""`mdvdb status --verify`: read every table, vector and indexed file and tell problems (the
index is damaged or lies: the check fails) from stale files (changed or deleted since the
ingest: one `mdvdb ingest` away from current)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from kernel import index_format, shards
from kernel.file_hash import sha256_file

# A vector is unit length when its norm is within this of 1 (float32 rounding is ~1e-7).
NORM_TOLERANCE = 1e-3
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX_LISTED = 20  # examples named per kind of problem


@dataclass
class VerifyReport:
    index_path: str
    files: int = 0
    chunks: int = 0
    problems: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    keyword_only: int = 0  # chunks with no vector (the provider gave none usable)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "index_path": self.index_path,
            "ok": self.ok,
            "files": self.files,
            "chunks": self.chunks,
            "problems": self.problems,
            "stale": self.stale,
            "keyword_only": self.keyword_only,
        }


def new_files(snapshot: Any, root: Path | str, walked: Any) -> list[str]:
    """Files the walk finds that the index lacks, except those the last ingest left out and that
    have not changed since (ctime too): counted as new, they would keep `status --check` at 3
    however often an agent ingests."""
    import os

    indexed = set(snapshot.paths)
    skipped = snapshot.meta.get("skipped") or {}
    out = []
    for path in walked:
        if path in indexed:
            continue
        known = skipped.get(path) if isinstance(skipped, dict) else None
        if known:
            try:
                st = os.stat(os.path.join(str(root), path))
                if [st.st_size, st.st_mtime_ns, st.st_ctime_ns] == list(known):
                    continue
            except OSError:
                pass
        out.append(path)
    return sorted(out)


def verify(index_path: Path | str, root: Path | str) -> VerifyReport:
    """Check the index at `index_path` against the project folder `root`; a shard manifest
    (`MDVDB_SHARDS`) checks every shard file it names."""
    if Path(index_path).name == shards.MANIFEST:
        return _verify_sharded(Path(index_path), root)
    return _verify_file(index_path, root)


def _verify_sharded(path: Path, root: Path | str) -> VerifyReport:
    """Each shard as an index of its own (checksums, tables, files on disk), every file in
    the shard its path hashes to, the counts the manifest records, and the global file."""
    report = VerifyReport(index_path=str(path))
    try:
        manifest = shards.read_manifest(path.parent)
    except shards.ShardsError as exc:
        report.problems.append(str(exc))
        return report
    if manifest is None:
        report.problems.append(f"no index at {path}: run `mdvdb ingest` first")
        return report
    for entry in manifest.entries:
        part = _verify_file(path.parent / entry.name, root)
        report.files += part.files
        report.chunks += part.chunks
        report.stale += part.stale
        report.problems += [f"{entry.name}: {problem}" for problem in part.problems]
        if part.ok and (part.files, part.chunks) != (entry.files, entry.chunks):
            report.problems.append(f"{entry.name}: the manifest records other row counts")
        if part.ok:
            paths = index_format.read_index(path.parent / entry.name).tables["files"]
            wrong = [
                p
                for p in paths.column("path").to_pylist()
                if shards.shard_of(p, manifest.shards) != entry.shard
            ]
            if wrong:
                report.problems.append(
                    f"{entry.name}: holds files of other shards: " + _listed(wrong)
                )
    try:
        extra = index_format.read_index(path.parent / manifest.global_file)
        report.problems += [
            f"{manifest.global_file}: {p}" for p in index_format.verify_checksums(extra)
        ]
        near = extra.tables.get("near_duplicates")
        if near is None or near.num_rows != report.chunks:
            report.problems.append(f"{manifest.global_file}: near-duplicate rows != chunks")
        if report.ok:
            from query.shards.reader import order_problems

            report.problems += order_problems(path.parent, manifest)
    except index_format.IndexFormatError as exc:
        report.problems.append(str(exc))
    return report


def _verify_file(index_path: Path | str, root: Path | str) -> VerifyReport:
    report = VerifyReport(index_path=str(index_path))
    try:
        file = index_format.read_index(index_path)
    except index_format.IndexFormatError as exc:
        report.problems.append(str(exc))
        return report
    except Exception as exc:  # a torn Arrow stream surfaces as an Arrow error
        report.problems.append(f"unreadable index: {type(exc).__name__}: {exc}")
        return report
    _check_meta(file, report)
    report.problems.extend(index_format.verify_checksums(file))
    try:
        with np.errstate(all="ignore"):
            _check_tables(file, Path(root), report)
    except Exception as exc:  # damaged bytes can fail anywhere (bad UTF-8, bad ids...)
        if report.ok:
            raise  # a sound index: a bug, not damage
        report.problems.append(f"unreadable rows: {type(exc).__name__}: {exc}")
    return report


def _check_tables(file: index_format.IndexFile, root: Path, report: VerifyReport) -> None:
    files = file.tables.get("files")
    chunks = file.tables.get("chunks")
    if files is None or chunks is None:
        missing = [n for n, t in (("files", files), ("chunks", chunks)) if t is None]
        report.problems.append(f"missing table(s): {', '.join(missing)}")
        return
    report.files, report.chunks = files.num_rows, chunks.num_rows
    dims = int(file.meta.get("dimensions") or 0)
    if not _check_schema("files", files.schema, index_format.FILES_SCHEMA, report):
        return
    if not _check_schema("chunks", chunks.schema, index_format.chunks_schema(dims), report):
        return
    _check_counts(file.meta, files, chunks, report)
    _check_files_table(files, report)
    _check_chunks_table(chunks, files.num_rows, dims, report)
    _check_clusters(file.tables.get("clusters"), files, report)
    from kernel import ivf

    report.problems.extend(
        ivf.problems(None, file.meta, chunks.num_rows, dims, table=file.tables.get(ivf.TABLE))
    )
    _check_disk(files, root, report)


def _check_meta(file: index_format.IndexFile, report: VerifyReport) -> None:
    version = file.meta.get("format_version")
    if version != index_format.FORMAT_VERSION:
        report.problems.append(
            f"footer says format version {version!r}, expected {index_format.FORMAT_VERSION}"
        )


def _check_schema(name: str, actual, wanted, report: VerifyReport) -> bool:
    """Every column the format defines is there with its type (extra columns are allowed:
    frontmatter columns and later additions)."""
    ok = True
    for wanted_field in wanted:
        index = actual.get_field_index(wanted_field.name)
        if index < 0:
            report.problems.append(f"table {name}: column {wanted_field.name} is missing")
            ok = False
        elif not actual.field(index).type.equals(wanted_field.type):
            report.problems.append(
                f"table {name}: column {wanted_field.name} has type {actual.field(index).type}, "
                f"expected {wanted_field.type}"
            )
            ok = False
    return ok


def _check_counts(meta: dict, files, chunks, report: VerifyReport) -> None:
    for name, table in (("files", files), ("chunks", chunks)):
        if name in meta and int(meta[name]) != table.num_rows:
            report.problems.append(
                f"footer counts {meta[name]} {name} but the table has {table.num_rows} rows"
            )


def _listed(items: list, total: int | None = None) -> str:
    total = len(items) if total is None else total
    shown = ", ".join(str(i) for i in items[:_MAX_LISTED])
    return shown + (f" ... ({total} in all)" if total > _MAX_LISTED else "")


def _check_files_table(files, report: VerifyReport) -> None:
    ids = files.column("file_id").to_numpy(zero_copy_only=False)
    if not np.array_equal(ids, np.arange(files.num_rows)):
        report.problems.append("table files: file_id is not 0..n-1 in order")
    paths = files.column("path").to_pylist()
    seen: set[str] = set()
    for path in paths:
        if not path or path.startswith("/") or ".." in PurePosixPath(path).parts:
            report.problems.append(f"table files: path {path!r} is not a root-relative path")
        elif path in seen:
            report.problems.append(f"table files: path {path} appears twice")
        seen.add(path or "")
    bad = [
        p
        for p, s in zip(paths, files.column("sha256").to_pylist(), strict=True)
        if not (s and _HEX64.match(s))
    ]
    if bad:
        report.problems.append(f"table files: malformed sha256 for {_listed(bad)}")


def _check_chunks_table(chunks, n_files: int, dims: int, report: VerifyReport) -> None:
    n = chunks.num_rows
    ids = chunks.column("chunk_id").to_numpy(zero_copy_only=False)
    if not np.array_equal(ids, np.arange(n)):
        report.problems.append("table chunks: chunk_id is not 0..n-1 in order")
    file_ids = chunks.column("file_id").to_numpy(zero_copy_only=False)
    outside = np.flatnonzero((file_ids < 0) | (file_ids >= n_files))
    if outside.size:
        report.problems.append(
            f"table chunks: file_id out of range for chunks {_listed(outside.tolist())}"
        )
    starts = chunks.column("start_line").to_numpy(zero_copy_only=False)
    ends = chunks.column("end_line").to_numpy(zero_copy_only=False)
    bad_lines = np.flatnonzero((starts < 1) | (ends < starts))
    if bad_lines.size:
        report.problems.append(
            f"table chunks: bad line range for chunks {_listed(bad_lines.tolist())}"
        )
    shas = chunks.column("sha256").to_pylist()
    bad_sha = [i for i, s in enumerate(shas) if not (s and _HEX64.match(s))]
    if bad_sha:
        report.problems.append(f"table chunks: malformed sha256 for chunks {_listed(bad_sha)}")
    _check_vectors(chunks, dims, report)


def _check_vectors(chunks, dims: int, report: VerifyReport) -> None:
    if dims <= 0:
        report.problems.append(f"footer gives {dims} vector dimensions")
        return
    column = index_format.column_array(chunks, "vector")
    # A null vector is a chunk the provider gave no usable vector for (pipeline.embed): it is
    # searched by keywords only; its values are written as zeros.
    present = np.ones(chunks.num_rows, dtype=bool)
    if column.null_count:
        present = column.is_valid().to_numpy(zero_copy_only=False)
        report.keyword_only = int((~present).sum())
    if chunks.num_rows == 0:
        return
    flat = column.values.to_numpy(zero_copy_only=False)
    if flat.size != chunks.num_rows * dims:
        report.problems.append(
            f"table chunks: {flat.size} vector values for {chunks.num_rows} chunks of {dims}"
        )
        return
    vectors = flat.reshape(chunks.num_rows, dims)
    absent = np.flatnonzero(~present)
    if absent.size and np.any(vectors[absent] != 0):
        report.problems.append(
            f"table chunks: a null vector holds values for chunks {_listed(absent.tolist())}"
        )
    finite = np.isfinite(vectors).all(axis=1) | ~present
    if not finite.all():
        bad = np.flatnonzero(~finite).tolist()
        report.problems.append(f"table chunks: non-finite vector for chunks {_listed(bad)}")
    norms = np.linalg.norm(np.where(np.isfinite(vectors), vectors, 0), axis=1)
    off = np.flatnonzero(present & finite & (np.abs(norms - 1.0) > NORM_TOLERANCE)).tolist()
    if off:
        report.problems.append(
            f"table chunks: vector not unit length for chunks {_listed(off)} "
            f"(norms {', '.join(f'{norms[i]:.3f}' for i in off[:5])})"
        )


def _check_clusters(clusters, files, report: VerifyReport) -> None:
    ids = files.column("cluster_id").to_numpy(zero_copy_only=False)
    used = set(np.unique(ids[ids >= 0]).tolist())
    if not used:
        return
    known: set[int] = set()
    if clusters is not None and "cluster_id" in clusters.column_names:
        known = set(clusters.column("cluster_id").to_pylist())
    unknown = sorted(used - known)
    if unknown:
        report.problems.append(
            f"table files: cluster ids {_listed(unknown)} are not in the clusters table"
        )


def _check_disk(files, root: Path, report: VerifyReport) -> None:
    """Hash every indexed file: a changed stat is staleness, the same stat with other bytes
    means the index recorded a version that never was (damage)."""
    paths = files.column("path").to_pylist()
    shas = files.column("sha256").to_pylist()
    sizes = files.column("size").to_pylist()
    mtimes = files.column("mtime").to_pylist()
    mismatched: list[str] = []
    for path, sha, size, mtime in zip(paths, shas, sizes, mtimes, strict=True):
        target = root / path
        try:
            st = target.stat()
            digest = sha256_file(target, root)  # as the walk reads it: never a FIFO
        except FileNotFoundError:
            report.stale.append(f"{path}: deleted since indexing")
            continue
        except OSError as exc:
            report.stale.append(f"{path}: cannot be read now ({exc.strerror or exc})")
            continue
        if digest == sha:
            continue
        same_stat = st.st_size == size and abs(st.st_mtime_ns / 1e9 - mtime) <= 1e-6
        if same_stat:
            mismatched.append(path)
        else:
            report.stale.append(f"{path}: changed since indexing")
    if mismatched:
        report.problems.append(
            "file hash differs from the index although size and mtime are the indexed ones: "
            + _listed(mismatched)
        )
