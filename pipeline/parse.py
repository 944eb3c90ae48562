"""Parse: frontmatter (metadata, never embedded), the heading tree with line numbers, the body.
A file with invalid frontmatter is still indexed with empty metadata and the problem reported;
frontmatter is untrusted and bounded (docs/security.md, "Every input bounded")."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import frontmatter
import yaml

from kernel import conventions
from kernel.text_decode import decode

# Bounds on frontmatter, generous for real notes (the corpora's largest is a few KB).
MAX_FRONTMATTER_CHARS = 128 * 1024
MAX_FRONTMATTER_DEPTH = 32
MAX_FRONTMATTER_KEYS = 1000  # top-level fields of one file
MAX_FRONTMATTER_VALUES = 20_000  # scalars, lists and mappings, aliases expanded
MAX_HEADING_CHARS = 1000
# A longer line (minified HTML, a data URI) is indexed up to this many characters.
MAX_LINE_CHARS = 100_000


# CPython's refusal to convert a longer run of digits to an int (a denial-of-service bound)
_HUGE_INT = re.compile(r"integer string conversion: value has (\d+) digits")


class YamlBoundError(ValueError):
    """YAML (frontmatter, the schema overlay) over one of the bounds; the message names it."""


@dataclass
class Heading:
    level: int
    text: str
    line: int  # 1-based line in the original file


@dataclass
class ParsedDoc:
    # The whole file, BOM removed, line endings normalised; in the body, comments blanked
    # and wikilinks as their visible text (`kernel.conventions`).
    lines: list[str]
    body_start: int  # 1-based line where the body starts (after frontmatter)
    metadata: dict[str, Any] = field(default_factory=dict)
    headings: list[Heading] = field(default_factory=list)
    title: str = ""
    error: str | None = None
    aliases: list[str] = field(default_factory=list)  # frontmatter `aliases` / `alias`
    tags: list[str] = field(default_factory=list)  # inline `#tags` of the body, without `#`
    # [index in `lines`, the line with its wikilinks as written], for pipeline/links.py
    link_lines: list[list] = field(default_factory=list)


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    # Headings are block-level; inline parsing is most of the cost and is not needed.
    md.core.ruler.disable(["inline", "text_join"])
    return md


def json_safe(value: Any) -> Any:
    """YAML gives dates, sets and odd keys; the index stores JSON."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [json_safe(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def split_frontmatter(text: str) -> tuple[dict[str, Any], int, str | None]:
    """(metadata, 1-based body start line, error) for YAML, TOML or JSON frontmatter."""
    handlers = [frontmatter.YAMLHandler(), frontmatter.JSONHandler()]
    if frontmatter.TOMLHandler is not None and getattr(frontmatter.default_handlers, "toml", None):
        handlers.append(frontmatter.TOMLHandler())
    handler = frontmatter.detect_format(text, handlers)
    if handler is None:
        return {}, 1, None
    try:
        fm_text, content = handler.split(text)
    except ValueError:
        return {}, 1, None  # an opening delimiter with no closing one: a thematic break
    head = text[: len(text) - len(content)]
    body_start = head.count("\n") + 1 if not content.startswith("\n") else head.count("\n") + 2
    try:
        if len(fm_text) > MAX_FRONTMATTER_CHARS:
            raise YamlBoundError(
                f"{len(fm_text)} characters (the limit is {MAX_FRONTMATTER_CHARS})"
            )
        if isinstance(handler, frontmatter.YAMLHandler):
            data = load_yaml(fm_text)
        else:
            if isinstance(handler, frontmatter.JSONHandler):
                data = json.loads(
                    "{" + fm_text + "}" if not fm_text.strip().startswith("{") else fm_text
                )
            else:
                data = handler.load(fm_text)
            _check_value(data)
    except YamlBoundError as exc:
        return {}, body_start, f"frontmatter not read: {exc}; body indexed"
    except RecursionError:
        return (
            {},
            body_start,
            (
                f"frontmatter not read: nested deeper than {MAX_FRONTMATTER_DEPTH} levels; "
                "body indexed"
            ),
        )
    except yaml.YAMLError as exc:
        # The file's lines before the frontmatter's text, where the opening delimiter ends.
        opening = handler.FM_BOUNDARY.search(text)
        before = text.count("\n", 0, opening.end()) if opening is not None else 0
        return {}, body_start, "invalid YAML frontmatter" + yaml_message(exc, fm_text, before)
    except Exception as exc:  # TOML/JSON decoders raise their own types
        huge = _HUGE_INT.search(str(exc)) if isinstance(exc, ValueError) else None
        if huge:  # Python's own message tells the user to call sys.set_int_max_str_digits()
            return (
                {},
                body_start,
                f"frontmatter not read: a number of {huge.group(1)} digits (the limit is "
                f"{sys.get_int_max_str_digits()}); body indexed",
            )
        return {}, body_start, f"invalid frontmatter: {str(exc).splitlines()[0]}"
    if data is None:
        return {}, body_start, None
    if not isinstance(data, dict):
        return {}, body_start, f"frontmatter is a {type(data).__name__}, not a mapping"
    return json_safe(data), body_start, None


# LibYAML's messages that leave out the character PyYAML names: (offset from the mark, wording).
_UNNAMED = {
    "found character that cannot start any token": (
        0,
        "found character {} that cannot start any token",
    ),
    "found unknown escape character": (1, "found unknown escape character {}"),
}


def yaml_message(exc: yaml.YAMLError, fm_text: str, before: int) -> str:
    """` at line N, column C: problem` for a YAML error, the line counted in the file, the
    character named as PyYAML names it."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    where = ""
    if mark is not None:
        where = f" at line {before + mark.line + 1}, column {mark.column + 1}"
    elif isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        line = before + fm_text.count("\n", 0, exc.position) + 1
        where, problem = f" at line {line}", str(exc).splitlines()[0]
    if not problem:
        return f": {str(exc).splitlines()[0]}" if str(exc) else ""
    named = _UNNAMED.get(problem)
    if named is not None and mark is not None and mark.index + named[0] < len(fm_text):
        problem = named[1].format(repr(fm_text[mark.index + named[0]]))
    elif problem == "found undefined alias" and mark is not None:
        alias = re.match(r"\*([^\s,\[\]{}]+)", fm_text[mark.index :])
        if alias:
            problem = f"found undefined alias {alias.group(1)!r}"
    return f"{where}: {problem}"


def load_yaml(text: str) -> Any:
    """Safe-load YAML (frontmatter, the schema overlay), checking the bounds on the node graph
    before building values: `YamlBoundError` names the bound passed."""
    if len(text) > MAX_FRONTMATTER_CHARS:
        raise YamlBoundError(f"{len(text)} characters (the limit is {MAX_FRONTMATTER_CHARS})")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlBoundError(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels") from None
    finally:
        loader.dispose()


def _check_nodes(root: yaml.Node) -> None:
    """Raise YamlBoundError when the node graph, aliases followed, is too deep, too large, has
    too many top-level keys or contains itself (each node measured once)."""
    if isinstance(root, yaml.MappingNode) and len(root.value) > MAX_FRONTMATTER_KEYS:
        raise YamlBoundError(f"{len(root.value)} keys (the limit is {MAX_FRONTMATTER_KEYS})")
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height)
    open_nodes: set[int] = set()

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        key = id(node)
        known = done.get(key)
        if known is None:
            if key in open_nodes:
                raise YamlBoundError(
                    "an alias refers to a value that contains it (recursive alias)"
                )
            if depth > MAX_FRONTMATTER_DEPTH:
                raise YamlBoundError(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
            open_nodes.add(key)
            if isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = node.value
            else:
                children = []
            values, height = 1, 0
            for child in children:
                child_values, child_height = measure(child, depth + 1)
                values += child_values
                height = max(height, child_height + 1)
                if values > MAX_FRONTMATTER_VALUES:
                    raise YamlBoundError(
                        f"expands to more than {MAX_FRONTMATTER_VALUES} values "
                        "(YAML aliases followed)"
                    )
            open_nodes.discard(key)
            known = done[key] = (values, height)
        if depth + known[1] > MAX_FRONTMATTER_DEPTH:
            raise YamlBoundError(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
        return known

    measure(root, 0)


def _check_value(data: Any) -> None:
    """The same bounds on JSON or TOML frontmatter (plain trees: no aliases, no cycles)."""
    if isinstance(data, dict) and len(data) > MAX_FRONTMATTER_KEYS:
        raise YamlBoundError(f"{len(data)} keys (the limit is {MAX_FRONTMATTER_KEYS})")
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_FRONTMATTER_VALUES:
            raise YamlBoundError(f"more than {MAX_FRONTMATTER_VALUES} values")
        if depth > MAX_FRONTMATTER_DEPTH:
            raise YamlBoundError(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def headings_of(lines: list[str], body_start: int) -> list[Heading]:
    """The headings of the body, as markdown-it's CommonMark block parser finds them (by
    `plain_headings` when it can tell)."""
    body = "\n".join(lines[body_start - 1 :])
    found = plain_headings(body)
    if found is None:
        found = parsed_headings(body)
    out = []
    for level, text, line in found:
        text = text.strip()
        if len(text) > MAX_HEADING_CHARS:
            text = text[: MAX_HEADING_CHARS - 1].rstrip() + "…"
        out.append(Heading(level, text, line + body_start))
    return out


def parsed_headings(body: str) -> list[tuple[int, str, int]]:
    """(level, text as markdown-it gives it, 0-based line) of each heading of `body`."""
    tokens = _markdown().parse(body)
    found = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            text = tokens[i + 1].content if i + 1 < len(tokens) else ""
            found.append((int(token.tag[1:]), text, token.map[0]))
    return found


# The fast heading scan: in a body whose every line is of the plain kinds below (paragraphs,
# plain list items, block quotes, ATX headings at the margin), the headings are exactly the
# lines opening with 1-6 `#` and a space, tab or line end; any other line sends the file to
# markdown-it (`tests/test_heading_scan.py` compares the two on the shared corpora).
#
# A paragraph's first character: anything that opens no block construct at the margin
# (`-+*_=` only before more of them, a space or the line end; `~` and backtick as a run of
# three; a digit only as an ordered-list marker).
_PARAGRAPH = (
    r"(?:[^\s>\-+*=_<~`#0-9\x00]"
    r"|[-+*_=](?=[^-+*_=\s])"
    r"|~(?!~~)"
    r"|`(?!``)"
    r"|[0-9](?![0-9]{0,8}[.)](?:[ \t]|$)))"
)
# The start of a line that is none of: blank, a `#` line, a paragraph line, a block-quote
# line holding a paragraph line or nothing, a list item holding a paragraph line.
_UNSURE_LINE = re.compile(
    r"^(?![ \t]*$"
    r"|#"
    rf"|{_PARAGRAPH}"
    rf"|>[ ]?(?:{_PARAGRAPH}|[ \t]*$)"
    rf"|(?:[-+*]|[0-9]{{1,9}}[.)])[ ]{_PARAGRAPH})",
    re.MULTILINE,
)
_ATX = re.compile(r"^(#{1,6})((?:[ \t][^\n]*)?)$", re.MULTILINE)


def plain_headings(body: str) -> list[tuple[int, str, int]] | None:
    """What `parsed_headings` gives, for a body of plain lines only; else None."""
    if "\0" in body or _UNSURE_LINE.search(body) is not None:
        return None  # markdown-it turns NUL into U+FFFD
    found = []
    line = pos = 0
    for match in _ATX.finditer(body):
        line += body.count("\n", pos, match.start())
        pos = match.start()
        # markdown-it's heading rule: the closing run of `#` goes if a space or tab precedes it.
        rest = match.group(2).rstrip(" \t")
        bare = rest.rstrip("#")
        if bare and bare[-1] in " \t":
            rest = bare
        found.append((len(match.group(1)), _md_trim(rest), line))
    return found


def _md_trim(text: str) -> str:
    from markdown_it.common.utils import mdTrim

    return mdTrim(text)


def parse_document(raw: bytes, path: str) -> ParsedDoc:
    text, decode_problem = decode(raw)
    metadata, body_start, fm_problem = split_frontmatter(text)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    long_problem = _cut_long_lines(lines)
    lines, tags, linked = conventions.indexed_lines(lines, body_start - 1)
    headings = headings_of(lines, body_start)
    for heading in headings:  # shown and stored as a reader sees it: `\#Tag` reads `#Tag`
        heading.text = conventions.unescape(heading.text)
    problems = [p for p in (fm_problem, decode_problem, long_problem) if p]
    doc = ParsedDoc(
        lines=lines,
        body_start=body_start,
        metadata=metadata,
        headings=headings,
        error="; ".join(problems) or None,
        aliases=conventions.aliases_of(metadata),
        tags=tags,
        link_lines=[list(pair) for pair in linked],
    )
    doc.title = title_of(doc, path)
    return doc


def _cut_long_lines(lines: list[str]) -> str | None:
    """Cut lines over MAX_LINE_CHARS in place; the problem to report, if any."""
    cut = [i for i, line in enumerate(lines) if len(line) > MAX_LINE_CHARS]
    if not cut:
        return None
    longest = max(len(lines[i]) for i in cut)
    for i in cut:
        lines[i] = lines[i][:MAX_LINE_CHARS]
    where = ", ".join(str(i + 1) for i in cut[:5]) + (" ..." if len(cut) > 5 else "")
    return (
        f"line {where} longer than {MAX_LINE_CHARS} characters (up to {longest}); "
        f"indexed up to {MAX_LINE_CHARS}"
    )


def title_of(doc: ParsedDoc, path: str) -> str:
    """The file's title: frontmatter `title`, else its first H1, else its file name."""
    title = doc.metadata.get("title")
    if isinstance(title, str) and title.strip():
        title = title.strip()
        return title if len(title) <= MAX_HEADING_CHARS else title[: MAX_HEADING_CHARS - 1] + "…"
    for heading in doc.headings:
        if heading.level == 1:
            return heading.text
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
