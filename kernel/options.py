"""How a command's options are declared once: a dataclass whose fields each carry a `Spec`
(docs/architecture.md, "Options declared once"). Imports only `dataclasses`.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields


@dataclass(frozen=True)
class Spec:
    """How the front ends spell one field (its name and default are the field's own)."""

    value: type  # one value's type: str, int, float or bool
    help: str = ""
    flags: tuple[str, ...] = ()  # the CLI's spellings; () for a positional argument
    mcp: str = ""  # the MCP argument's name when it is not the field's
    repeat: str = ""  # "many": repeatable, a list; "once": the CLI refuses a repeat by name
    # (a positional with "many" takes every argument left)
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    setting: str | None = None  # the MDVDB_ setting that supplies the value when None
    metavar: str = ""  # how --help shows the value (default: the type's)
    dash_value: bool = False  # the value may start with `-` (`grep -e --force`)


def option(default, spec: Spec):
    """A dataclass field declared as an option; `REQUIRED`: the CLI needs it given."""
    if default is REQUIRED:
        return field(metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


REQUIRED = MISSING


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
    def required(self) -> bool:
        return self.default is MISSING

    @property
    def is_negative_flag(self) -> bool:
        return self.spec.value is bool and self.default is True

    def bound_problem(self, value, name: str = "") -> str | None:
        """Why `value` is outside this option's bounds, or None (`name`: how to call the
        option; default: the field's name)."""
        low, high, name = self.spec.minimum, self.spec.maximum, name or self.name
        if value is None:
            return None
        if low is not None and value < low:
            if low == 0:
                return f"{name} must be 0 (no cap) or more, got {value}"
            return f"{name} must be at least {low:g}, got {value}"
        if high is not None and value > high:
            return f"{name} must be at most {high:g}, got {value}"
        return None


def declared(cls: type) -> tuple[Option, ...]:
    """The options of a dataclass declared with `option()` fields, in field order."""
    return tuple(Option(f.name, f.default, f.metadata["option"]) for f in fields(cls))
