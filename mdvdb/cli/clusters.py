"""`mdvdb clusters`'s typer command (its run: `mdvdb.cli.cluster_list`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mdvdb.cli.app import JsonOption, RootOption, app


@app.command()
def clusters(
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also write a 2-D map of the documents (.html or .svg)."),
    ] = None,
    root: RootOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the document clusters: id, label, size, keywords, most central documents."""
    # The same run as the parser of the hot path (`mdvdb.cli.cluster_list`, no typer).
    from mdvdb.cli.cluster_list import run_clusters

    run_clusters(None if root is None else str(root), as_json, None if plot is None else str(plot))
