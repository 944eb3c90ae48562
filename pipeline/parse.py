"""Parse: frontmatter (metadata, never embedded), the heading tree with line numbers, the body.

A file whose frontmatter is invalid is still indexed (body and headings); its metadata is empty
and the problem is reported with the path and the line.

Frontmatter is untrusted input with bounds (`FrontmatterBounds`): its size, its nesting, its
number of top-level keys and the number of values it expands to once YAML aliases are
followed. A 1 KB "billion laughs" alias bomb composes in microseconds but expands to 3.5e9
values; a recursive alias (`a: &a [*a]`) never ends. Both are measured on YAML's node graph
(aliases are shared nodes there, so counting is linear in the text) before any Python value
is built, and a file over a bound keeps its body and headings with empty metadata.

Headings are kept to `MAX_HEADING_CHARS` characters: a heading is stored with every chunk
under it (heading and heading path), so a 1 MB heading line would otherwise be copied into
every chunk cut from its section.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import frontmatter
import yaml

# Bounds on frontmatter (see the module docstring). Generous for real notes: the largest
# frontmatter in the shared corpora is a few KB with a few dozen keys.
MAX_FRONTMATTER_CHARS = 128 * 1024
MAX_FRONTMATTER_DEPTH = 32
MAX_FRONTMATTER_KEYS = 1000  # top-level fields of one file
MAX_FRONTMATTER_VALUES = 20_000  # scalars, lists and mappings, aliases expanded
MAX_HEADING_CHARS = 1000
# A longer line (minified HTML, a data URI, a generated table) is indexed up to this many
# characters: tokenizing and storing a 1 MB line costs seconds and megabytes per copy.
MAX_LINE_CHARS = 100_000


class _OverBound(ValueError):
    """Frontmatter over one of the bounds; the message names it."""


@dataclass
class Heading:
    level: int
    text: str
    line: int  # 1-based line in the original file


@dataclass
class ParsedDoc:
    lines: list[str]  # the whole file, BOM removed, line endings normalised
    body_start: int  # 1-based line where the body starts (after frontmatter)
    metadata: dict[str, Any] = field(default_factory=dict)
    headings: list[Heading] = field(default_factory=list)
    title: str = ""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ParsedDoc:
        data = dict(data)
        data["headings"] = [Heading(**h) for h in data["headings"]]
        return cls(**data)


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


def decode(raw: bytes) -> tuple[str, str | None]:
    try:
        text = raw.decode("utf-8")
        problem = None
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        problem = f"not valid UTF-8 at byte {exc.start}; decoded with replacement characters"
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n"), problem


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
            raise _OverBound(f"{len(fm_text)} characters (the limit is {MAX_FRONTMATTER_CHARS})")
        if isinstance(handler, frontmatter.YAMLHandler):
            data = _load_yaml(fm_text)
        else:
            if isinstance(handler, frontmatter.JSONHandler):
                data = json.loads(
                    "{" + fm_text + "}" if not fm_text.strip().startswith("{") else fm_text
                )
            else:
                data = handler.load(fm_text)
            _check_value(data)
    except _OverBound as exc:
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
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return {}, body_start, f"invalid YAML frontmatter{line}: {problem}"
    except Exception as exc:  # TOML/JSON decoders raise their own types
        return {}, body_start, f"invalid frontmatter: {str(exc).splitlines()[0]}"
    if data is None:
        return {}, body_start, None
    if not isinstance(data, dict):
        return {}, body_start, f"frontmatter is a {type(data).__name__}, not a mapping"
    return json_safe(data), body_start, None


def _load_yaml(text: str) -> Any:
    """Safe-load YAML, checking the bounds on the node graph before building values."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_nodes(root: yaml.Node) -> None:
    """Raise _OverBound when the node graph, aliases followed, is too deep, too large, has
    too many top-level keys or contains itself. Linear in the distinct nodes: each node's
    expanded size and height are computed once (an alias is the same node object)."""
    if isinstance(root, yaml.MappingNode) and len(root.value) > MAX_FRONTMATTER_KEYS:
        raise _OverBound(f"{len(root.value)} keys (the limit is {MAX_FRONTMATTER_KEYS})")
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height)
    open_nodes: set[int] = set()

    def measure(node: yaml.Node, depth: int) -> tuple[int, int]:
        key = id(node)
        known = done.get(key)
        if known is None:
            if key in open_nodes:
                raise _OverBound("an alias refers to a value that contains it (recursive alias)")
            if depth > MAX_FRONTMATTER_DEPTH:
                raise _OverBound(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
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
                    raise _OverBound(
                        f"expands to more than {MAX_FRONTMATTER_VALUES} values "
                        "(YAML aliases followed)"
                    )
            open_nodes.discard(key)
            known = done[key] = (values, height)
        if depth + known[1] > MAX_FRONTMATTER_DEPTH:
            raise _OverBound(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
        return known

    measure(root, 0)


def _check_value(data: Any) -> None:
    """The same bounds on JSON or TOML frontmatter (plain trees: no aliases, no cycles)."""
    if isinstance(data, dict) and len(data) > MAX_FRONTMATTER_KEYS:
        raise _OverBound(f"{len(data)} keys (the limit is {MAX_FRONTMATTER_KEYS})")
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_FRONTMATTER_VALUES:
            raise _OverBound(f"more than {MAX_FRONTMATTER_VALUES} values")
        if depth > MAX_FRONTMATTER_DEPTH:
            raise _OverBound(f"nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def headings_of(lines: list[str], body_start: int) -> list[Heading]:
    body = "\n".join(lines[body_start - 1 :])
    tokens = _markdown().parse(body)
    found = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            text = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            if len(text) > MAX_HEADING_CHARS:
                text = text[: MAX_HEADING_CHARS - 1].rstrip() + "…"
            found.append(Heading(int(token.tag[1:]), text, token.map[0] + body_start))
    return found


def parse_document(raw: bytes, path: str) -> ParsedDoc:
    text, decode_problem = decode(raw)
    metadata, body_start, fm_problem = split_frontmatter(text)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    long_problem = _cut_long_lines(lines)
    headings = headings_of(lines, body_start)
    problems = [p for p in (fm_problem, decode_problem, long_problem) if p]
    doc = ParsedDoc(
        lines=lines,
        body_start=body_start,
        metadata=metadata,
        headings=headings,
        error="; ".join(problems) or None,
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
    title = doc.metadata.get("title")
    if isinstance(title, str) and title.strip():
        title = title.strip()
        return title if len(title) <= MAX_HEADING_CHARS else title[: MAX_HEADING_CHARS - 1] + "…"
    for heading in doc.headings:
        if heading.level == 1:
            return heading.text
    if doc.headings:
        return doc.headings[0].text
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
