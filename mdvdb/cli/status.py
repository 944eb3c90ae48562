"""`mdvdb status`: what the index holds and whether it is up to date."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kernel.options import Spec, declared, option
from kernel.terminal import printable
from mdvdb.cli import errors
from mdvdb.cli.errors import (
    EXIT_ERROR,
    EXIT_NO_INDEX,
    EXIT_OK,
    EXIT_STALE,
    CliError,
    line,
    load,
    print_json,
    refuse_if_off,
    user_errors,
)
from mdvdb.cli.parser import Command

PROBLEMS_SHOWN = 20  # problems the human status lists; `--json` has them all


@dataclass(frozen=True)
class StatusOptions:
    check: bool = option(
        False, Spec(bool, "Only an exit code: 0 fresh, 3 stale, 4 no index.", ("--check",))
    )
    verify: bool = option(
        False, Spec(bool, "Read and check the whole index; exit 1 if unsound.", ("--verify",))
    )


def run_status(
    root: str | None = None,
    as_json: bool = False,
    check: bool = False,
    verify: bool = False,
) -> int:
    """Print the status; the exit code."""
    with user_errors():
        config = load(root)
        if check:
            refuse_if_off(config)  # the same line and code as `search`: one check suffices
        if verify:
            return run_verify(config, as_json)
        return _status(config, as_json, check)


def _status(config, as_json: bool, check: bool) -> int:
    st, damage = _status_of(config)
    if st.exists:
        st.new_files = _new_files(config)
    if damage and not as_json:
        # the readers' own line ("index damaged: run `mdvdb ingest --full` (...)") as is
        plain = damage.startswith("index damaged") or "written by a newer mdvdb" in damage
        raise CliError(damage if plain else f"damaged index: {damage}")
    if check:
        code = EXIT_OK if st.fresh else EXIT_STALE if st.exists else EXIT_NO_INDEX
        if as_json:
            print_json({"fresh": st.fresh, "exists": st.exists, "exit": code})
        return code
    from pipeline import upgrade_progress, writer_holder

    writer = writer_holder(config.state_path)  # pid, command, since; or None

    upgrade = upgrade_progress(config) if st.exists else None
    if as_json:
        print_json(
            {
                **st.to_json(),
                "damaged": damage,
                "switched_off": config.switched_off,
                "writer": writer,
                "upgrade": upgrade,
            }
        )
        return EXIT_OK
    if not st.exists:
        if writer is not None:
            raise CliError(f"no index at {st.index_path} yet: {_writing(writer)} builds it")
        raise CliError(f"no index at {st.index_path}: run `mdvdb ingest`")
    updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.last_update or 0))
    line(f"root:       {config.root}")
    line(f"index:      {st.index_path} ({st.index_bytes / 1e6:.1f} MB)")
    line(f"documents:  {st.files}")
    line(f"chunks:     {st.chunks}")
    line(f"updated:    {updated}")
    line(f"embeddings: {st.provider}:{st.model} ({st.dimensions} dims)")
    if upgrade is not None:
        line(f"upgrade:    {_upgrade_text(upgrade)}")
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
    _print_broken(st.broken_links)
    if writer is not None:
        line(f"writer:     {_writing(writer)} holds the lock")
    if config.switched_off:
        line("switched off: .mdvdb-off exists here; `mdvdb search` exits 5")
    return EXIT_OK


def _print_broken(broken) -> None:
    """The broken links, one line each (`path:line: [[target]]`); nothing without a graph."""
    if broken is None:
        return
    if not broken:
        line("links:      none broken")
        return
    line(f"links:      {len(broken)} broken")
    for link in broken[:PROBLEMS_SHOWN]:
        line(f"  {printable(f'{link.source}:{link.line}: {link.written}', one_line=True)}")
    if len(broken) > PROBLEMS_SHOWN:
        line(f"  ... and {len(broken) - PROBLEMS_SHOWN} more (`mdvdb status --json` lists them)")


def _upgrade_text(upgrade: dict) -> str:
    eta = upgrade["eta_seconds"]
    when = f", about {eta:.0f} s of embedding left" if eta is not None else ""
    return (
        f"to {upgrade['model']}: {upgrade['share']:.0%} of {upgrade['chunks']} chunks "
        f"({upgrade['left']} left{when}); `mdvdb ingest` or a running watcher continues it, "
        "search uses the static model until then"
    )


def _writing(writer: dict) -> str:
    from pipeline import since_text

    command = printable(writer["command"], one_line=True)
    return f"pid {writer['pid']} ({command}, since {since_text(writer['since'])})"


def _status_of(config):
    """The index's status, and what is wrong with a file there that cannot be read."""
    from kernel.index_format import IndexFormatError
    from query import open_index

    index = open_index(config=config, lite=errors.ONE_SHOT)
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


def _new_files(config) -> list[str]:
    """Files on disk that the index does not have (uses the ingest's own walk and rules)."""
    from pipeline import walk_files
    from query import new_files, open_index

    snapshot = open_index(config=config, lite=errors.ONE_SHOT).snapshot
    return new_files(snapshot, config.root, walk_files(config, []))


def run_verify(config, as_json: bool) -> int:
    """`status --verify`: check the whole index; exit 1 listing the problems."""
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


COMMAND = Command(
    "status",
    declared(StatusOptions),
    run_status,
    help="What the index holds and whether it is up to date.",
)
