"""`mdvdb clusters`: the topics of the index, to browse before searching."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel.options import Spec, declared, option
from mdvdb.cli.errors import EXIT_OK, EXIT_USAGE, CliError, line, load, print_json, user_errors
from mdvdb.cli.parser import Command

PLOT_SUFFIXES = (".html", ".htm", ".svg")


@dataclass(frozen=True)
class ClustersOptions:
    plot: str | None = option(
        None,
        Spec(Path, "Also write a 2-D map of the documents (.html or .svg).", ("--plot",)),
    )


def run_clusters(root: str | None = None, as_json: bool = False, plot: str | None = None) -> int:
    with user_errors():
        config, plot = load(root), None if plot is None else Path(plot)
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
            return EXIT_OK
        summary = listing.summary
        silhouette = summary.get("silhouette")
        head = f"{listing.documents} documents in {len(listing.clusters)} clusters"
        if silhouette is not None:
            head += f" (silhouette {silhouette:.3f})"
        if summary.get("pending"):
            head += f"; {summary['pending']} assigned since the last full clustering"
        line(head)
        for c in listing.clusters:
            line(f"\n[{c.cluster_id}] {c.label}  ({c.size} documents)")
            line(f"    keywords: {', '.join(c.keywords)}")
            for rep in c.representatives:
                title = f"  ({rep.title})" if rep.title else ""
                line(f"    - {rep.path}{title}")
        if plot is not None:
            line(f"\nmap of {drawn} documents written to {plot}")
    return EXIT_OK


COMMAND = Command(
    "clusters",
    declared(ClustersOptions),
    run_clusters,
    help="List the document clusters: id, label, size, keywords, most central documents.",
)
