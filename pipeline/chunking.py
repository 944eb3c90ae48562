"""Chunk: one chunk per heading section, overlapping windows of whole lines past the token
budget; each keeps its heading path and 1-based inclusive line range. Tokens are counted with
the bundled Llama-2 tokenizer whatever the provider, so boundaries never move with it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pipeline.parse import ParsedDoc
from pipeline.state import embed_text_of


@dataclass
class Chunk:
    heading: str
    heading_path: list[str]
    start_line: int
    end_line: int
    text: str  # the section's lines as parse gives them (comments blanked, wikilinks as their text)
    embed_text: str  # what is embedded and hashed: heading context + text
    token_count: int
    sha256: str

    def to_json(self) -> dict:
        # By hand, in field order (the same JSON as `asdict` gives): `asdict` deep-copies
        # every value, a large part of the chunk stage's time.
        return {
            "heading": self.heading,
            "heading_path": list(self.heading_path),
            "start_line": self.start_line,
            "end_line": self.end_line,
            "text": self.text,
            "embed_text": self.embed_text,
            "token_count": self.token_count,
            "sha256": self.sha256,
        }


def chunking_key(max_tokens: int, overlap: int) -> str:
    """Cache key of a chunking: changes when the rules or the settings change."""
    return f"v3:{max_tokens}:{overlap}"


def _count(texts: list[str]) -> list[int]:
    return [len(ids) for ids in token_ids(texts)]


def token_ids(texts: list[str]) -> list[list[int]]:
    """Ids of the bundled tokenizer, the one the local model embeds with."""
    if not texts:
        return []
    from kernel.providers.local import load_tokenizer

    tokenizer = load_tokenizer()
    # `encode_batch_fast` (tokenizers >= 0.20) gives the same ids without the character
    # offsets, which are never read here (`_split_line` asks for them itself).
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    return [e.ids for e in encode(texts, add_special_tokens=False)]


@dataclass
class _Section:
    heading: str
    path: list[str]
    start: int  # 1-based inclusive
    end: int


def sections_of(doc: ParsedDoc) -> list[_Section]:
    lines = doc.lines
    sections: list[_Section] = []
    stack: list[tuple[int, str]] = []
    first_heading = doc.headings[0].line if doc.headings else len(lines) + 1
    if any(line.strip() for line in lines[doc.body_start - 1 : first_heading - 1]):
        sections.append(_Section("", [], doc.body_start, first_heading - 1))
    for i, heading in enumerate(doc.headings):
        while stack and stack[-1][0] >= heading.level:
            stack.pop()
        stack.append((heading.level, heading.text))
        end = doc.headings[i + 1].line - 1 if i + 1 < len(doc.headings) else len(lines)
        nxt = doc.headings[i + 1] if i + 1 < len(doc.headings) else None
        has_body = any(line.strip() for line in lines[heading.line : end])
        # A parent heading with no text of its own lives on in its children's heading paths.
        if not has_body and nxt is not None and nxt.level > heading.level:
            continue
        sections.append(_Section(heading.text, [t for _, t in stack], heading.line, end))
    for section in sections:
        while section.end > section.start and not lines[section.end - 1].strip():
            section.end -= 1
    return sections


def _windows(line_tokens: list[int], max_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """Greedy windows of whole lines (0-based, end exclusive) under max_tokens, each starting
    so that about `overlap` tokens of the previous window repeat."""
    windows = []
    start = 0
    n = len(line_tokens)
    while start < n:
        end, total = start, 0
        while end < n and (end == start or total + line_tokens[end] <= max_tokens):
            total += line_tokens[end]
            end += 1
        windows.append((start, end))
        if end >= n:
            break
        back, kept = end, 0
        while back - 1 > start and kept + line_tokens[back - 1] <= overlap:
            back -= 1
            kept += line_tokens[back]
        start = back
    return windows


def chunk_document(doc: ParsedDoc, max_tokens: int, overlap: int) -> list[Chunk]:
    return chunk_with_token_ids(doc, max_tokens, overlap)[0]


def chunk_with_token_ids(
    doc: ParsedDoc, max_tokens: int, overlap: int
) -> tuple[list[Chunk], list[list[int] | None]]:
    """The chunks, and for each the token ids of its `embed_text` when counting produced them
    (else None), so the local model need not tokenize the text again."""
    lines = doc.lines
    sections = sections_of(doc)
    texts = ["\n".join(lines[s.start - 1 : s.end]) for s in sections]
    section_ids = token_ids(texts)
    chunks: list[Chunk] = []
    ids_of: list[list[int] | None] = []
    for section, text, ids in zip(sections, texts, section_ids, strict=True):
        count = len(ids)
        if count <= max_tokens:
            chunk = _make(section, section.start, section.end, text, count)
            chunks.append(chunk)
            ids_of.append(ids if chunk.embed_text == chunk.text else None)
            continue
        first = len(chunks)
        section_lines = lines[section.start - 1 : section.end]
        line_tokens = _count(section_lines)
        for a, b in _windows(line_tokens, max_tokens, overlap):
            if b - a == 1 and line_tokens[a] > max_tokens:
                chunks.extend(_split_line(section, section.start + a, section_lines[a], max_tokens))
                continue
            piece = "\n".join(section_lines[a:b])
            if not piece.strip():
                # A window of blank lines (the overlap stepping back onto the blank line
                # before an over-budget line): nothing to embed, a zero vector if embedded.
                continue
            chunks.append(
                _make(
                    section, section.start + a, section.start + b - 1, piece, sum(line_tokens[a:b])
                )
            )
        ids_of.extend([None] * (len(chunks) - first))
    return chunks, ids_of


def _split_line(section: _Section, line_no: int, line: str, max_tokens: int) -> list[Chunk]:
    """A single line longer than the budget (minified HTML, a data URI): cut by token offsets."""
    from kernel.providers.local import load_tokenizer

    offsets = load_tokenizer().encode(line, add_special_tokens=False).offsets
    out = []
    for i in range(0, len(offsets), max_tokens):
        part = offsets[i : i + max_tokens]
        text = line[part[0][0] : part[-1][1]]
        if not text.strip():
            continue
        out.append(_make(section, line_no, line_no, text, len(part)))
    return out


def _make(section: _Section, start: int, end: int, text: str, tokens: int) -> Chunk:
    embed_text = embed_text_of(section.path, text)
    return Chunk(
        heading=section.heading,
        heading_path=list(section.path),
        start_line=start,
        end_line=end,
        text=text,
        embed_text=embed_text,
        token_count=tokens,
        sha256=hashlib.sha256(embed_text.encode()).hexdigest(),
    )
