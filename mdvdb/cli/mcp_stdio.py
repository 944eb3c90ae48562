"""`mdvdb mcp` over stdio without typer: how agents' clients start it (`mdvdb mcp --root DIR`).

The MCP SDK's own import is most of the start, but typer's (with its pydantic adapters for the
command's options, ~0.1 s) is not needed to read `--root`. `fast_main` serves stdio when the
arguments are `--root DIR` at most (`mdvdb.cli.plain_args`), and hands back None for anything
else (`--http`, `--token-file`, `--help`, a usage error), which the typer command
(`agents.mcp`) then runs; both call `mcp_server.serve` the same way.
"""

from __future__ import annotations

from mdvdb.cli.errors import EXIT_OK, load, user_errors


def fast_main(argv: list[str]) -> int | None:
    from mdvdb.cli.plain_args import parse

    args = parse(argv, {})
    if args is None or "as_json" in args:  # `mcp` has no --json: typer's usage error
        return None
    with user_errors():
        config = load(args.get("root"))
        from mdvdb import mcp_server

        mcp_server.serve(config, http_port=None, token_file=None)
    return EXIT_OK
