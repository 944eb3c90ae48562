"""`mdvdb clusters`: the topics of the index, to browse before searching."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel.config import Config
from mdvdb.cli.app import (
    EXIT_USAGE,
    CliError,
    app,
    print_json,
)
from mdvdb.cli.declared import on_project

PLOT_SUFFIXES = (".html", ".htm", ".svg")


@app.command()
@on_project
def clusters(
    config: Config,
    as_json: bool,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also write a 2-D map of the documents (.html or .svg)."),
    ] = None,
) -> None:
    """List the document clusters: id, label, size, keywords, most central documents."""
    if plot is not None and plot.suffix.lower() not in PLOT_SUFFIXES:
        raise CliError(f"--plot {plot}: write a .html or .svg file", EXIT_USAGE)
    if plot is not None and not plot.parent.is_dir():
        raise CliError(f"--plot {plot}: folder {plot.parent} does not exist", EXIT_USAGE)
    from query import list_clusters, open_index
    from query import write_cluster_map as write_map

    index = open_index(config=config)
    listing = list_clusters(index)
    drawn = None
    if plot is not None:
        try:
            drawn = write_map(index, plot)
        except OSError as exc:
            raise CliError(f"--plot {plot}: cannot write ({exc.strerror or exc})") from None
    if as_json:
        data = listing.to_json()
        if plot is not None:
            data["plot"] = {"path": str(plot), "documents": drawn}
        print_json(data)
        return
    summary = listing.summary
    silhouette = summary.get("silhouette")
    head = f"{listing.documents} documents in {len(listing.clusters)} clusters"
    if silhouette is not None:
        head += f" (silhouette {silhouette:.3f})"
    if summary.get("pending"):
        head += f"; {summary['pending']} assigned since the last full clustering"
    typer.echo(head)
    for c in listing.clusters:
        typer.echo(f"\n[{c.cluster_id}] {c.label}  ({c.size} documents)")
        typer.echo(f"    keywords: {', '.join(c.keywords)}")
        for rep in c.representatives:
            title = f"  ({rep.title})" if rep.title else ""
            typer.echo(f"    - {rep.path}{title}")
    if plot is not None:
        typer.echo(f"\nmap of {drawn} documents written to {plot}")
