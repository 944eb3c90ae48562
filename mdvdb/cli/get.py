"""`mdvdb get TARGET...`: indexed documents, their content and metadata, paged (what a
target names: `query.documents`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kernel.options import REQUIRED, Spec, declared, option
from mdvdb.cli import errors
from mdvdb.cli.errors import EXIT_ERROR, EXIT_OK, line, load, print_json, user_errors
from mdvdb.cli.parser import Command, UsageError


@dataclass(frozen=True)
class GetOptions:
    targets: Sequence[str] = option(
        REQUIRED,
        Spec(
            str,
            "Paths (relative to the project root), PATH:START-END or PATH:START+COUNT "
            "(1-based lines), document ids (#abc12345), quoted globs ('notes/*.md') or "
            "note names.",
            repeat="many",
            metavar="TARGET",
        ),
    )
    max_tokens: int | None = option(
        None,
        Spec(
            int,
            "Cut each document's content at about this many tokens (4 characters each), "
            "at a line's end; the output gives the next page's --offset.",
            ("--max-tokens",),
            minimum=1,
        ),
    )
    offset: int = option(
        0,
        Spec(
            int,
            "Start one document's content this many characters in (the offset a previous "
            "page gave).",
            ("--offset",),
            minimum=0,
        ),
    )


def run_get(
    targets: Sequence[str],
    root: str | None = None,
    as_json: bool = False,
    max_tokens: int | None = None,
    offset: int = 0,
) -> int:
    from query import open_index

    with user_errors():
        config = load(root)
        index = open_index(config=config, lite=errors.ONE_SHOT)
        docs = _documents(index, [typed_path(index, t) for t in targets], max_tokens, offset)
        if as_json:
            one = len(targets) == 1 and len(docs) == 1
            print_json(docs[0].to_json() if one else {"documents": [d.to_json() for d in docs]})
            return EXIT_OK
        for n, doc in enumerate(docs):
            if n:
                sys.stdout.write("\n")
            _print(doc, max_tokens)
        sys.stdout.flush()
    return EXIT_OK


def _documents(index, targets: list[str], max_tokens: int | None, offset: int) -> list:
    """The documents named; a note name several files have exits 1 listing them."""
    from query import AmbiguousName

    try:
        if offset:
            if len(targets) != 1:
                raise UsageError("--offset pages one document: give one target")
            return [index.get_document(targets[0], max_tokens=max_tokens, offset=offset)]
        return index.get_documents(targets, max_tokens=max_tokens)
    except AmbiguousName as ambiguous:
        from kernel.terminal import printable

        count = len(ambiguous.candidates)
        said = f"mdvdb: {ambiguous.name}: {count} files have this name; give one of these paths:"
        line(printable(said, one_line=True), err=True)
        for path in ambiguous.candidates:
            line(f"  {printable(path, one_line=True)}", err=True)
        raise SystemExit(EXIT_ERROR) from None


def _print(doc, max_tokens: int | None) -> None:
    from kernel.terminal import printable
    from kernel.yaml_values import yaml_value

    out = sys.stdout
    out.write(printable(f"# {doc.path}  ({doc.title})  #{doc.id}", one_line=True) + "\n")
    for key, value in doc.metadata.items():
        out.write(printable(f"{key}: {yaml_value(value)}", one_line=True) + "\n")
    out.write("\n")
    content = printable(doc.content)
    out.write(content if doc.content.endswith("\n") or not content else content + "\n")
    if doc.next_offset is not None:
        more = f" --max-tokens {max_tokens}" if max_tokens else ""
        out.write(
            f"[lines {doc.start_line}-{doc.end_line} of {doc.total_lines}; next page: "
            f"mdvdb get {printable(doc.path, one_line=True)} --offset {doc.next_offset}{more}]\n"
        )


def typed_path(index, path: str) -> str:
    """The file a path typed in a subfolder names: relative to the current folder first (as
    a shell completes it), else to the root (as mdvdb prints paths)."""
    here = os.path.realpath(os.getcwd())
    root = str(index.config.root)
    if os.path.isabs(path) or here == root or not here.startswith(root + os.sep):
        return path
    from_here = os.path.join(here, path)
    rel = os.path.relpath(os.path.normpath(from_here), root).replace(os.sep, "/")
    if not rel.startswith("../") and index.path_id(rel) is not None:
        return from_here
    return path


COMMAND = Command(
    "get",
    declared(GetOptions),
    run_get,
    help="Print indexed documents by path, line range, id, glob or note name: content and "
    "metadata, paged with --max-tokens and --offset.",
)
