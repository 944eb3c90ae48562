"""`mdvdb mcp`: the index served as MCP tools for agents (stdio by default, or HTTP)."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.options import Spec, declared, option
from mdvdb.cli.errors import EXIT_OK, load, user_errors
from mdvdb.cli.parser import Command


@dataclass(frozen=True)
class McpOptions:
    http: int | None = option(
        None,
        Spec(
            int,
            "Serve MCP over HTTP on 127.0.0.1:PORT; requests need the bearer token.",
            ("--http",),
            minimum=1,
            maximum=65535,
        ),
    )
    token_file: str | None = option(
        None,
        Spec(
            str,
            "With --http: the bearer token's file (0600). Default: one generated in the state "
            "folder (mcp-http.token), printed at start.",
            ("--token-file",),
        ),
    )


def mcp(root: str | None, http: int | None, token_file: str | None) -> int:
    with user_errors():
        config = load(root)
        from mdvdb import mcp_server

        mcp_server.serve(config, http_port=http, token_file=token_file)
    return EXIT_OK


COMMAND = Command(
    "mcp",
    declared(McpOptions),
    mcp,
    help="Serve the index as MCP tools (stdio by default) for agents.\n\nTools: search, "
    "grep, get_document, schema, clusters, status, ingest. Add to an MCP client as the command "
    "`mdvdb mcp --root /path/to/notes`.",
    json=False,
)
