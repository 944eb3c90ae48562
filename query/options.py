"""How a command's options are declared once: a dataclass whose fields each carry a `Spec`.

`query.search_options.SearchRequest` (`mdvdb search`, the MCP tool, the library) and
`query.grep.options.GrepRequest` (`mdvdb grep`) are declared this way. From the one
declaration the shell builds both of its parsers: the hand parser of the hot path
(`mdvdb.cli.hand_parser`, no typer) and the typer command that prints `--help`
(`mdvdb.cli.declared`). Nothing here imports more than `dataclasses`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Spec:
    """How the front ends spell one field (its name and default are the field's own)."""

    value: type  # one value's type: str, int, float or bool
    help: str = ""
    flags: tuple[str, ...] = ()  # the CLI's spellings; () for the positional argument
    mcp: str = ""  # the MCP argument's name when it is not the field's
    repeat: str = ""  # "many": repeatable, a list; "once": the CLI refuses a repeat by name
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    setting: str | None = None  # the MDVDB_ setting that supplies the value when None
    metavar: str = ""  # how --help shows the value (default: the type's)
    dash_value: bool = False  # the value may start with `-` (`grep -e --force`)


def option(default, spec: Spec):
    """A dataclass field declared as an option."""
    return field(default=default, metadata={"option": spec})


@dataclass(frozen=True)
class Option:
    """One declared option: the field's name and default with its `Spec`."""

    name: str
    default: object
    spec: Spec

    @property
    def mcp_name(self) -> str:
        return self.spec.mcp or self.name

    @property
    def dest(self) -> str:
        """The CLI's parameter name: `no_collapse` for a flag that turns a True off."""
        return f"no_{self.name}" if self.is_negative_flag else self.name

    @property
    def is_negative_flag(self) -> bool:
        return self.spec.value is bool and self.default is True

    def bound_problem(self, value) -> str | None:
        """Why `value` is outside this option's bounds, or None."""
        minimum = self.spec.minimum
        if value is None or minimum is None or value >= minimum:
            return None
        if minimum == 0:
            return f"{self.name} must be 0 (no cap) or more, got {value}"
        return f"{self.name} must be at least {minimum}, got {value}"


def declared(cls: type) -> tuple[Option, ...]:
    """The options of a dataclass declared with `option()` fields, in field order."""
    return tuple(Option(f.name, f.default, f.metadata["option"]) for f in fields(cls))
