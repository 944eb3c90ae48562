"""The one record an ingest reports: `mdvdb ingest` (text and --json), `mdvdb.ingest()`, the
MCP `ingest` tool and the watcher all read this type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.stages import Chunked, Clustered, Embedded, Manifest, Packed, Parsed, once_per_path


@dataclass
class IngestReport:
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    hashed: int = 0  # files read and hashed because their stat changed
    files: int = 0
    chunks: int = 0
    chunks_embedded: int = 0
    parsed: int = 0
    published: bool = False
    index_bytes: int = 0
    seconds: float = 0.0
    errors: list[tuple[str, str]] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # CPU seconds (this process and its worker processes), per stage and for the run.
    stage_cpu_seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    chunked: int = 0  # chunks cut from new or changed files this run
    workers: int = 1  # processes that parsed, chunked and embedded them (MDVDB_WORKERS)
    executor: str = "local"  # where they ran: local or ray (MDVDB_EXECUTOR)
    executor_start_seconds: float = 0.0  # of `seconds`, Ray's start-up (cluster and actors)
    executor_actors: list[dict] = field(default_factory=list)  # Ray: each actor's report
    clustering: str = ""  # what the cluster stage did: full, assign, unchanged (or "")
    reused_files: int = 0  # files whose rows pack reused from the previous index
    # The upgrade to a contextual model this run advanced (`pipeline.upgrade.advance`).
    upgrade: dict | None = None
    root: str = ""  # the project root indexed (found upward from a subfolder: kernel.dotenv)

    @property
    def nothing_changed(self) -> bool:
        """No file's content changed and nothing was parsed or embedded again (what `ingest
        --quiet` keeps quiet about, touched files included)."""
        work = self.added or self.changed or self.removed or self.parsed or self.chunks_embedded
        return not (work or self.chunked)

    @classmethod
    def of_outputs(
        cls, outputs: Mapping[str, object], stage_seconds: Mapping[str, float], seconds: float
    ) -> IngestReport:
        """The report of a run from what its stages returned (a stage doit found up to date
        returned nothing and adds nothing)."""
        report = cls(stage_seconds=dict(stage_seconds), seconds=seconds)
        problems: list[tuple[str, str]] = []
        for output in outputs.values():
            problems.extend(getattr(output, "problems", ()))
            if isinstance(output, Manifest):
                report.added, report.changed = output.added, output.changed
                report.removed, report.unchanged = output.removed, output.unchanged
                report.hashed = output.hashed
                report.files = len(output.entries)
            elif isinstance(output, Parsed | Chunked):
                report.parsed += output.parsed
                if isinstance(output, Parsed):
                    report.chunks_embedded += output.embedded
                    report.chunked += output.chunks
                    report.workers = output.workers
                    report.executor = output.executor
                    report.executor_start_seconds = output.executor_start_seconds
                    report.executor_actors = list(output.executor_actors)
            elif isinstance(output, Embedded):
                report.chunks_embedded += output.chunks_embedded
            elif isinstance(output, Clustered) and output.mode != "disabled":
                report.clustering = output.mode
            elif isinstance(output, Packed):
                report.index_bytes, report.chunks = output.index_bytes, output.chunks
                report.reused_files = output.reused_files
                report.published = True
        report.errors = sorted(once_per_path(problems))  # by path, as `status` lists them
        return report

    def to_json(self) -> dict[str, Any]:
        """The record `mdvdb ingest --json` prints."""
        return {
            "root": self.root,
            "files": self.files,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "hashed": self.hashed,
            "chunks": self.chunks,
            "chunks_embedded": self.chunks_embedded,
            "published": self.published,
            "index_bytes": self.index_bytes,
            "seconds": round(self.seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "cpu_seconds": round(self.cpu_seconds, 3),
            # Throughput of this run: chunks cut (and embedded) a wall second, and how many
            # cores it kept busy on average.
            "chunked": self.chunked,
            "chunks_per_second": round(self.chunked / self.seconds, 1) if self.seconds else 0.0,
            "cpu_per_wall": round(self.cpu_seconds / self.seconds, 2) if self.seconds else 0.0,
            "workers": self.workers,
            "executor": self.executor,
            "executor_start_seconds": round(self.executor_start_seconds, 3),
            # Where the Ray actors ran and what they held (node, pid, num_gpus, device,
            # model, batch_size); empty for the local executor.
            "executor_actors": self.executor_actors,
            "stage_cpu_seconds": {k: round(v, 3) for k, v in self.stage_cpu_seconds.items()},
            "errors": [{"path": p, "problem": m} for p, m in self.errors],
            "errors_total": len(self.errors),
            "upgrade": self.upgrade,
        }
