"""`mdvdb status` without typer: what the index holds and whether it is up to date.

The typer command (`core.status`, for `--help` and usage errors) and `fast_main` (every
other call: hooks and harnesses run `status --check` often) both run `run_status`, so both
print the same bytes and exit with the same code.
"""

from __future__ import annotations

import sys
import time

from mdvdb.cli.errors import (
    EXIT_ERROR,
    EXIT_NO_INDEX,
    EXIT_OK,
    EXIT_STALE,
    CliError,
    load,
    print_json,
    refuse_if_off,
    user_errors,
)

FLAGS = {"--check": "check", "--verify": "verify"}
PROBLEMS_SHOWN = 20  # problems the human status lists; `--json` has them all


def fast_main(argv: list[str], one_shot: bool = False) -> int | None:
    """The exit code, or None to have typer parse `argv`. `one_shot`: this process ends after
    the command, so the index is mapped without pyarrow (`kernel.arrow_lite`; the same
    answers, `query.snapshot`)."""
    from mdvdb.cli.plain_args import parse

    args = parse(argv, FLAGS)
    if args is None:
        return None
    return run_status(**args, lite=one_shot)


def line(text: str = "", err: bool = False) -> None:
    """typer.echo's bytes for plain text: the text and a newline, flushed (so that stdout and
    stderr lines keep their order in one file)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}\n")
    stream.flush()


def run_status(
    root: str | None = None,
    as_json: bool = False,
    check: bool = False,
    verify: bool = False,
    lite: bool = False,
) -> int:
    """Print the status; the exit code. `lite`: map the index without pyarrow."""
    with user_errors():
        config = load(root)
        if check:
            refuse_if_off(config)  # the same line and code as `search`: one check suffices
        if verify:
            return run_verify(config, as_json)
        return _status(config, as_json, check, lite)


def _status(config, as_json: bool, check: bool, lite: bool) -> int:
    from kernel.terminal import printable

    st, damage = _status_of(config, lite)
    if st.exists:
        st.new_files = _new_files(config, lite)
    if damage and not as_json:
        # the readers' own line ("index damaged: run `mdvdb ingest --full` (...)") as is
        raise CliError(damage if damage.startswith("index damaged") else f"damaged index: {damage}")
    if check:
        code = EXIT_OK if st.fresh else EXIT_STALE if st.exists else EXIT_NO_INDEX
        if as_json:
            print_json({"fresh": st.fresh, "exists": st.exists, "exit": code})
        return code
    if as_json:
        print_json({**st.to_json(), "damaged": damage, "switched_off": config.switched_off})
        return EXIT_OK
    if not st.exists:
        raise CliError(f"no index at {st.index_path}: run `mdvdb ingest`")
    updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.last_update or 0))
    line(f"root:       {config.root}")
    line(f"index:      {st.index_path} ({st.index_bytes / 1e6:.1f} MB)")
    line(f"documents:  {st.files}")
    line(f"chunks:     {st.chunks}")
    line(f"updated:    {updated}")
    line(f"embeddings: {st.provider}:{st.model} ({st.dimensions} dims)")
    if st.provider_mismatch:
        line(f"stale:      {st.provider_mismatch}; run `mdvdb ingest`")
    stale = st.stale_files + st.new_files
    if stale:
        line(f"stale:      {len(stale)} files changed since indexing, e.g.:")
        for path in stale[:10]:
            line(f"  {printable(path, one_line=True)}")
    elif not st.provider_mismatch:
        line("stale:      none")
    if st.errors:
        total = len(st.errors) + st.errors_left_out
        line(f"problems:   {total} file{'s' if total != 1 else ''}")
        for found in st.errors[:PROBLEMS_SHOWN]:
            line(f"  {printable(f'{found.path}: {found.problem}', one_line=True)}")
        if total > PROBLEMS_SHOWN:
            more = total - PROBLEMS_SHOWN
            line(f"  ... and {more} more (`mdvdb status --json` lists them)")
    if config.switched_off:
        line("switched off: .mdvdb-off exists here; `mdvdb search` exits 5")
    return EXIT_OK


def _status_of(config, lite: bool = False):
    """The index's status, and what is wrong with it when the file is there but unreadable
    (`Index.status` calls such an index absent)."""
    from kernel.index_format import IndexFormatError
    from query import open_index

    index = open_index(config=config, lite=lite)
    try:
        st = index.status()
    except (OSError, ValueError, IndexFormatError) as exc:  # damaged, torn or foreign
        from query import Status

        st = Status(index_path=str(config.index_path), exists=False, root=str(config.root))
        reason = str(exc)
    else:
        if st.exists or not config.index_path.exists():
            return st, None
        try:
            index.snapshot  # noqa: B018 - the load says why it failed
            reason = "unreadable"
        except Exception as exc:
            reason = str(exc)
    if not config.index_path.exists():
        return st, None
    reason = reason.rstrip(".")
    if str(config.index_path) not in reason:
        reason = f"{config.index_path}: {reason}; run `mdvdb ingest --full`"
    return st, reason


def _new_files(config, lite: bool = False) -> list[str]:
    """Files on disk that the index does not have (uses the ingest's own walk and rules)."""
    from pipeline import walk_files
    from query import new_files, open_index

    snapshot = open_index(config=config, lite=lite).snapshot
    return new_files(snapshot, config.root, walk_files(config, []))


def run_verify(config, as_json: bool) -> int:
    """`status --verify`: check the whole index; exit 1 listing the problems when it is not
    sound."""
    from kernel.shards import published_source
    from query import verify_index as verify

    report = verify(published_source(config), config.root)
    if as_json:
        print_json(report.to_json())
    else:
        line(f"index:    {report.index_path}")
        line(f"checked:  {report.files} files, {report.chunks} chunks")
        for stale in report.stale[:20]:
            line(f"stale:    {stale}")
        if len(report.stale) > 20:
            line(f"stale:    ... and {len(report.stale) - 20} more; run `mdvdb ingest`")
        for problem in report.problems:
            line(f"problem:  {problem}", err=True)
        line("verify:   ok" if report.ok else f"verify:   {len(report.problems)} problem(s)")
    return EXIT_OK if report.ok else EXIT_ERROR
