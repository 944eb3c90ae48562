"""The arguments of a small command (flags, `--opt value`, one positional), read without typer.

`mdvdb status`, `get` and `schema` are started by hooks, harnesses and agents for one short
answer; typer's import and per-call setup (with pydantic, ~0.15 s) would be most of their
cost. Each command's `fast_main` reads the forms people and scripts use (`--flag`,
`--opt value`, `--opt=value`, one positional, `--`) with `parse`, and hands back None for
anything else (`--help`, an unknown or repeated option, a missing value, a second
positional): typer then parses `argv` and words the usage error, as before.
"""

from __future__ import annotations

from mdvdb.cli.errors import JSON_FLAG, ROOT_FLAG


def parse(
    argv: list[str],
    flags: dict[str, str],
    valued: dict[str, str] | None = None,
    positional: str | None = None,
) -> dict | None:
    """`{dest: value}` for `flags` (flag -> dest, set to True), `valued` options (flag -> dest),
    the shared `--root` (`root`) and `--json` (`as_json`) and the `positional`; None when
    typer should parse `argv`. Absent options are absent from the dict."""
    flags = {**flags, JSON_FLAG: "as_json"}
    valued = {**(valued or {}), ROOT_FLAG: "root"}
    args: dict = {}
    rest = iter(argv)
    for token in rest:
        if token == "--":
            extra = list(rest)
            if positional is None or positional in args or len(extra) > 1:
                return None
            if extra:
                args[positional] = extra[0]
            break
        name, equals, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in flags and not equals:
            if flags[name] in args:
                return None
            args[flags[name]] = True
        elif name in valued:
            value = inline if equals else next(rest, None)
            if value is None or valued[name] in args:
                return None
            args[valued[name]] = value
        elif token.startswith("-") and token != "-":
            return None  # --help, an unknown option: typer's words
        elif positional is None or positional in args:
            return None
        else:
            args[positional] = token
    return args
