"""`mdvdb doctor`: every check of a project in one command, each problem one line with its fix.

Configuration, model runtime, rg, the index, the state folder, running servers, stale files,
broken links; nothing is written. Exit 1 when a check found a problem.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from kernel.terminal import printable
from mdvdb.cli import warm  # imported by every CLI call already
from mdvdb.cli.errors import EXIT_ERROR, EXIT_OK, CliError, echo, load, print_json
from mdvdb.cli.parser import Command

__all__ = ["COMMAND", "Finding", "run_doctor"]

OK, PROBLEM, NOTE = "ok", "problem", "note"


@dataclass(frozen=True)
class Finding:
    """One check's verdict: `problem` lines carry the fix."""

    check: str
    status: str  # ok | problem | note
    message: str
    fix: str | None = None

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.status:<8} {self.check}: {self.message}{fix}"


@dataclass
class Checkup:
    findings: list[Finding] = field(default_factory=list)
    settings: list[dict[str, str]] = field(default_factory=list)

    def add(self, check: str, status: str, message: str, fix: str | None = None) -> None:
        self.findings.append(Finding(check, status, message, fix))

    @property
    def problems(self) -> int:
        return sum(f.status == PROBLEM for f in self.findings)


def run_doctor(root: str | None = None, as_json: bool = False) -> int:
    """Run every check, print them; the exit code."""
    checkup = Checkup()
    config = _config(root, checkup)
    if config is not None:
        for check in (_model, _ripgrep, _state_folder, _index, _running):
            try:
                check(config, checkup)
            except Exception as exc:  # a check that cannot run is itself a finding
                checkup.add(check.__name__.strip("_"), PROBLEM, f"could not check: {exc}")
    if as_json:
        print_json(
            {
                "ok": checkup.problems == 0,
                "problems": checkup.problems,
                "checks": [asdict(f) for f in checkup.findings],
                "settings": checkup.settings,
            }
        )
    else:
        for finding in checkup.findings:
            echo(printable(finding.line(), one_line=True))
        for setting in checkup.settings:
            shown = f"{setting['name']}={setting['value']} (from {setting['origin']})"
            echo(printable(f"setting  {shown}", one_line=True))
        count = checkup.problems
        echo(f"doctor: {count} problem{'s' if count != 1 else ''}" if count else "doctor: ok")
    return EXIT_ERROR if checkup.problems else EXIT_OK


def _config(root: str | None, checkup: Checkup):
    """The configuration, or None (a problem) when it cannot be loaded."""
    from kernel.config import OFF_FILE, SECRETS, SETTINGS, ConfigError, unknown_keys
    from kernel.dotenv import CONFIG_FILE

    try:
        config = load(root)
    except (ConfigError, CliError) as exc:
        checkup.add("config", PROBLEM, str(exc), "correct that setting (`mdvdb doctor` again)")
        return None
    path = config.root / CONFIG_FILE
    where = str(path) if path.is_file() else "no config file, defaults and environment"
    checkup.add("config", OK, f"root {config.root} ({where})")
    if config.switched_off:
        checkup.add("config", NOTE, f"search is switched off here ({config.root / OFF_FILE})")
    for key, suggestion in unknown_keys(config):
        hint = f"did you mean {suggestion}?" if suggestion else "remove it"
        checkup.add("config", PROBLEM, f"{path}: unknown key {key}", hint)
    if "MDVDB_SOURCES" in config.origins and not config.sources:
        checkup.add(
            "config",
            NOTE,
            f"MDVDB_SOURCES (from {config.origin('MDVDB_SOURCES')}) is not used: "
            f"MDVDB_SOURCE_DIRS from {config.origin('MDVDB_SOURCE_DIRS')} wins",
        )
    for setting in SETTINGS:
        origin = config.origin(setting.env)
        if setting.env == "MDVDB_SOURCE_DIRS" and config.sources:
            continue  # MDVDB_SOURCES' folders, listed under that name
        if origin != "the default" and setting.env not in SECRETS:
            raw = os.environ.get(setting.env) if origin == "the environment" else None
            value = raw if raw is not None else _shown(getattr(config, setting.attr))
            checkup.settings.append({"name": setting.env, "value": value, "origin": origin})
    return config


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(getattr(v, "name", v)) for v in value)
    return str(value)


def _model(config, checkup: Checkup) -> None:
    """The embedding model's runtime can be imported (nothing is loaded)."""
    from kernel.config import local_model_is_encoder

    provider, model = config.embedding_provider, config.embedding_model
    name = f"{provider} {model}"
    if provider != "local":  # created as ingest creates it: its settings, no request sent
        from kernel.providers import get_provider

        try:
            get_provider(config).close()
        except Exception as exc:  # the provider's own line (a missing key, a bad URL)
            checkup.add(
                "model", PROBLEM, f"{name}: {exc}", "set what it names (docs/embeddings.md)"
            )
            return
        checkup.add("model", OK, f"{name} (remote: reached at the next ingest or search)")
        return
    if not local_model_is_encoder(model):
        if importlib.util.find_spec("wordllama") is None:
            checkup.add(
                "model", PROBLEM, f"{name}: wordllama cannot be imported", "pip install wordllama"
            )
        else:
            checkup.add("model", OK, f"{name} (WordLlama)")
        return
    from kernel.providers import minilm

    missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
    if missing:
        checkup.add(
            "model",
            PROBLEM,
            f"{name} is configured but its runtime {' and '.join(missing)} cannot be imported "
            "(it would run on the NumPy reference, many times slower)",
            minilm.INSTALL_HINT,
        )
    try:
        folder = minilm.model_folder(model, config.root)
    except Exception as exc:  # the provider's own line: which package or file is missing
        checkup.add("model", PROBLEM, f"{name}: {exc}", minilm.INSTALL_HINT)
        return
    if not missing:
        checkup.add("model", OK, f"{name} ({folder}, onnxruntime)")


def _ripgrep(config, checkup: Checkup) -> None:
    from query import find_rg

    try:
        checkup.add("rg", OK, find_rg())
    except Exception as exc:
        checkup.add("rg", PROBLEM, f"`mdvdb grep` cannot run: {exc}", "pip install ripgrep==14.1.0")


def _state_folder(config, checkup: Checkup) -> None:
    """The state folder (caches, the writer lock) is a folder its user may read and write."""
    folder = config.state_path
    fix = f"chmod u+rwx {folder} (or remove it: it only costs a rebuild)"
    if not os.path.lexists(folder):
        checkup.add("state", OK, f"{folder} not created yet (the first ingest makes it)")
        return
    if not folder.is_dir():
        checkup.add("state", PROBLEM, f"{folder} is not a folder", f"remove {folder}")
        return
    if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
        checkup.add("state", PROBLEM, f"{folder} cannot be read and written by you", fix)
        return
    owner = folder.stat().st_uid
    if hasattr(os, "geteuid") and owner != os.geteuid():
        checkup.add("state", NOTE, f"{folder} belongs to uid {owner}, not to you")
    checkup.add("state", OK, f"{folder} readable and writable")


def _index(config, checkup: Checkup) -> None:
    """The index verifies (checksums, tables, rows), then what changed since it was built."""
    from kernel.shards import published_source
    from query import verify_index

    source = published_source(config)
    if not os.path.exists(source):
        checkup.add("index", PROBLEM, f"no index at {config.index_path}", "mdvdb ingest")
        return
    report = verify_index(source, config.root)
    for problem in report.problems:
        checkup.add("index", PROBLEM, problem, "mdvdb ingest --full")
    if not report.ok:
        return
    checkup.add("index", OK, f"{report.files} files, {report.chunks} chunks, checksums verified")
    _freshness(config, checkup)


def _freshness(config, checkup: Checkup) -> None:
    from mdvdb.cli.status import _new_files, _status_of

    status, damage = _status_of(config)
    if damage:
        checkup.add("index", PROBLEM, damage, "mdvdb ingest --full")
        return
    if status.provider_mismatch:
        checkup.add("index", PROBLEM, status.provider_mismatch, "mdvdb ingest")
    changed = status.stale_files + _new_files(config)
    if changed:
        shown = ", ".join(changed[:3]) + (", …" if len(changed) > 3 else "")
        checkup.add(
            "stale",
            PROBLEM,
            f"{len(changed)} files changed since the last ingest: {shown}",
            "mdvdb ingest",
        )
    else:
        checkup.add("stale", OK, "every file as indexed")
    for path, problem in ((p.path, p.problem) for p in status.errors[:20]):
        checkup.add("files", NOTE, f"{path}: {problem}")
    _broken_links(status, checkup)


def _broken_links(status, checkup: Checkup) -> None:
    """Broken links, as `status` lists them (None for a sharded index)."""
    broken = status.broken_links
    if broken is None:
        return
    if not broken:
        checkup.add("links", OK, "no broken link")
        return
    for link in broken[:20]:
        checkup.add(
            "links",
            PROBLEM,
            f"broken link {link.source}:{link.line} -> {link.target}",
            "correct the link or create the note it names",
        )
    if len(broken) > 20:
        checkup.add("links", PROBLEM, f"... and {len(broken) - 20} more (`mdvdb status`)", None)


def _running(config, checkup: Checkup) -> None:
    """A warm server or a writer (ingest, watcher) at work: notes, not problems."""
    from mdvdb.cli.status import _writing
    from pipeline import writer_holder

    writer = writer_holder(config.state_path)
    if writer is not None:
        checkup.add("writer", NOTE, f"{_writing(writer)} holds the writer lock")
    folder = config.state_path
    if not os.access(folder, os.R_OK | os.X_OK):
        return
    running = warm.ping(folder)
    if running:
        watching = "watching" if running.get("watching") else "not watching"
        checkup.add("serve", NOTE, f"`mdvdb serve` runs (pid {running['pid']}, {watching})")
    elif warm.lock_holder(folder) is not None:
        checkup.add("serve", NOTE, "`mdvdb serve` is starting (its lock is held)")


COMMAND = Command(
    "doctor",
    (),
    run_doctor,
    help="Check the configuration, the model's runtime, rg, the index, the state folder, "
    "running servers and stale files; one line per problem with its fix (exit 1 if any).",
)
