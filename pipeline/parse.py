"""Parse: frontmatter (metadata, never embedded), the heading tree with line numbers, the body.

A file whose frontmatter is invalid is still indexed (body and headings); its metadata is empty
and the problem is reported with the path and the line.
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
        if isinstance(handler, frontmatter.YAMLHandler):
            data = yaml.load(fm_text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        elif isinstance(handler, frontmatter.JSONHandler):
            data = json.loads(
                "{" + fm_text + "}" if not fm_text.strip().startswith("{") else fm_text
            )
        else:
            data = handler.load(fm_text)
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


def headings_of(lines: list[str], body_start: int) -> list[Heading]:
    body = "\n".join(lines[body_start - 1 :])
    tokens = _markdown().parse(body)
    found = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            text = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            found.append(Heading(int(token.tag[1:]), text, token.map[0] + body_start))
    return found


def parse_document(raw: bytes, path: str) -> ParsedDoc:
    text, decode_problem = decode(raw)
    metadata, body_start, fm_problem = split_frontmatter(text)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    headings = headings_of(lines, body_start)
    doc = ParsedDoc(
        lines=lines,
        body_start=body_start,
        metadata=metadata,
        headings=headings,
        error=fm_problem or decode_problem,
    )
    doc.title = title_of(doc, path)
    return doc


def title_of(doc: ParsedDoc, path: str) -> str:
    title = doc.metadata.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    for heading in doc.headings:
        if heading.level == 1:
            return heading.text
    if doc.headings:
        return doc.headings[0].text
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
