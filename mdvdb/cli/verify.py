"""Output of `mdvdb status --verify` (the flag lives on `status` in `core.py`)."""

from __future__ import annotations

import typer

from mdvdb.cli.app import EXIT_ERROR, print_json


def run_verify(config, as_json: bool) -> None:
    """Check the whole index; exit 1 listing the problems when it is not sound."""
    from kernel.shards import published_source
    from query import verify_index as verify

    report = verify(published_source(config), config.root)
    if as_json:
        print_json(report.to_json())
    else:
        typer.echo(f"index:    {report.index_path}")
        typer.echo(f"checked:  {report.files} files, {report.chunks} chunks")
        for line in report.stale[:20]:
            typer.echo(f"stale:    {line}")
        if len(report.stale) > 20:
            typer.echo(f"stale:    ... and {len(report.stale) - 20} more; run `mdvdb ingest`")
        for problem in report.problems:
            typer.echo(f"problem:  {problem}", err=True)
        typer.echo("verify:   ok" if report.ok else f"verify:   {len(report.problems)} problem(s)")
    if not report.ok:
        raise typer.Exit(EXIT_ERROR)
