"""Exact text search over the source roots with ripgrep (docs/grep.md): `--json` streamed,
each match filtered and handed on at once, rg stopped once `limit` matches are out. It reads
the source folders with the project's rules, never the index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernel.config import DEFAULT_LIMIT
from query.grep.sources import Root, Selection, search_paths

if TYPE_CHECKING:
    from kernel.project_files import RgRules

FILE_TYPES = ("md", "qmd", "all")
# rg type definitions per --type; "all" searches every file rg would (no type restriction).
# Any case, as the walk takes `NOTES.MD` (its suffix test lowers the name).
TYPE_GLOBS = {
    "md": ("*.[mM][dD]", "*.[mM][aA][rR][kK][dD][oO][wW][nN]"),
    "qmd": ("*.qmd",),
    "all": (),
}
INSTALL_HINT = (
    "ripgrep (rg) not found: install it into this environment with "
    "`pip install ripgrep==14.1.0`, or from your OS packages (e.g. `apt install ripgrep`)"
)
HEAD_SCAN_LINES = 400  # how far into a file the title heading is looked for
# rg's JSON message for one matching line is read up to this; a longer one (a line of
# megabytes, JSON-escaped) is not shown and is named in one warning instead.
MESSAGE_LIMIT = 4 << 20
# A matched file's head is read in lines of at most this (a one-line file is not read whole).
HEAD_LINE_LIMIT = 1 << 16
# rg counts frontmatter matches in --max-count and they are dropped here: rg may report this
# many more a file, so the per-file limit counts body matches.
FRONTMATTER_LINES = 1000


class GrepError(RuntimeError):
    """A search that cannot run (rg missing, no root to search); one line for the user."""


def rg_complaint(said: str, pattern: str, regex: bool, literal: str) -> str:
    """What rg wrote on stderr when it failed, in one line: for a bad regex its `error:` line and
    `literal` (how the front end asks for literal text); else its first lines joined."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    if regex and any("regex parse error" in line for line in lines):
        reason = next((ln[6:].strip() for ln in lines if ln.startswith("error:")), "cannot parse")
        return f"bad regex {pattern!r}: {reason} (ripgrep regex syntax; {literal})"
    detail = "; ".join(line.removeprefix("rg: ") for line in lines[:3])
    return f"ripgrep failed: {detail or 'no message'}"


@dataclass
class GrepOptions:
    pattern: str
    limit: int = DEFAULT_LIMIT
    per_file_limit: int = 50
    file_type: str = "md"
    regex: bool = False  # default: the pattern is literal text (rg --fixed-strings)
    sort: bool = False
    include_frontmatter: bool = False


def find_rg(exe_dir: str | None = None, path_env: str | None = None) -> str:
    """rg next to the interpreter (the `ripgrep` wheel's venv bin), else the first on PATH."""
    folder = os.path.dirname(sys.executable) if exe_dir is None else exe_dir
    candidates = [os.path.join(folder, "rg")] if folder else []
    path_env = os.environ.get("PATH", "") if path_env is None else path_env
    candidates += [os.path.join(d, "rg") for d in path_env.split(os.pathsep) if d]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise GrepError(INSTALL_HINT)


def build_argv(
    rg: str,
    options: GrepOptions,
    paths: list[Path],
    rules: RgRules | None = None,
    ignore_file: str | None = None,
) -> list[str]:
    """The exact rg command line: the pattern after `-e` and paths after `--`, so neither is a
    flag. `rules`: the project's (rg runs in `rules.cwd`); `ignore_file`: the translated lines."""
    argv = [rg, "--json", "--no-config", "--smart-case"]
    if not options.regex:
        argv.append("--fixed-strings")
    per_file = options.per_file_limit
    if not options.include_frontmatter:
        per_file += FRONTMATTER_LINES
    argv += ["--max-count", str(per_file)]
    globs = TYPE_GLOBS[options.file_type]
    if globs:
        for glob in globs:
            argv += ["--type-add", f"mdvdb:{glob}"]
        argv += ["--type", "mdvdb"]
    shown = [str(p) for p in paths]
    if rules is not None:
        argv += rules.flags
        if ignore_file is not None:
            argv += ["--ignore-file", ignore_file]
        shown = [rules.path_argument(p) for p in paths]
    argv += ["-e", options.pattern, "--", *shown]
    return argv


@dataclass(frozen=True)
class FileHead:
    """What a match's file contributes: frontmatter line range, title, page id."""

    frontmatter_end: int  # last line of the frontmatter block, 0 when there is none
    title: str
    page_id: str | None = None


@dataclass
class Match:
    path: str  # relative to the project root when inside it, else absolute
    source: str  # TYPE:ID of the root holding the file
    line: int
    text: str  # the whole line, without its line ending
    spans: list[tuple[int, int]]  # character offsets of the matched text in `text`
    head: FileHead

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "source": self.source,
            "line": self.line,
            "title": self.head.title,
            "snippet": self.text,
            "page_id": self.head.page_id,
        }


@dataclass
class _RawMatch:
    path: str  # absolute, as rg printed it
    line: int
    text: str
    spans: list[tuple[int, int]]


class GrepRun:
    """One rg process and the matches it yields; iterate it, then it is closed. `stopped_early`:
    rg was terminated at the limit. rg's messages go to `stderr` (a file the MCP server reads)."""

    def __init__(
        self,
        argv: list[str],
        selection: Selection,
        project_root: Path,
        options: GrepOptions,
        page_id_field: str = "page_id",
        stderr=None,
    ):
        self.argv = argv
        self.cwd: Path | None = None  # the project's rules (`start`) run rg in their folder
        self.ignore_lines: list[str] = []
        self.warnings: list[str] = []  # .gitignore files not read (`project_files.rg_rules`)
        self.stderr = stderr
        self.selection = selection
        self.options = options
        self.page_id_field = page_id_field
        self.root_prefix = str(project_root).rstrip("/") + "/"
        self.process: subprocess.Popen | None = None
        self.stopped_early = False
        self.emitted = 0
        self._drained = False  # rg's output was read to the end: it is exiting by itself
        self._heads: dict[str, FileHead | None] = {}
        self._owner_of: tuple[str | None, Root | None] = (None, None)
        self._per_file: dict[str, int] = {}  # body matches handed on, per file
        self.long_lines: list[str] = []  # files with a matching line too long to show

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def __iter__(self) -> Iterator[Match]:
        rules_file = _rules_file(self.ignore_lines) if self.ignore_lines else None
        argv = self.argv
        if rules_file is not None:  # the placeholder names the descriptor rg inherits
            fd_path = f"/dev/fd/{rules_file.fileno()}"
            argv = [fd_path if arg == IGNORE_FILE_SLOT else arg for arg in argv]
        try:
            self.process = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                stderr=self.stderr,
                close_fds=True,
                pass_fds=(rules_file.fileno(),) if rules_file is not None else (),
                cwd=self.cwd,
            )
        finally:
            if rules_file is not None:
                rules_file.close()  # rg holds its own inherited copy
        try:
            raws = self._sorted() if self.options.sort else self._stream()
            for raw in raws:
                match = self._accept(raw)
                if match is None:
                    continue
                self.emitted += 1
                yield match
                if self.emitted >= self.options.limit:
                    self.stop()
                    return
        finally:
            self.close()

    def stop(self) -> None:
        """Terminate rg if it is still running: the caller has all it asked for."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            self.stopped_early = True

    def close(self) -> None:
        proc = self.process
        if proc is None:
            return
        if not self._drained:
            self.stop()
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait()

    @property
    def failure(self) -> str | None:
        """Why rg did not finish its search (ended by a signal it was not sent here, or an
        unexpected status), else None; status 2 is rg's own message on stderr."""
        code = self.returncode
        if code is None or code in (0, 1, 2) or self.stopped_early:
            return None
        if code < 0:
            import signal

            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"ripgrep was ended by signal {name}; the search did not finish"
        return f"ripgrep failed (exit status {code}); the search did not finish"

    def _stream(self) -> Iterator[_RawMatch]:
        """rg's JSON messages, each read to at most `MESSAGE_LIMIT` bytes: a longer line is passed
        over (its path in `long_lines`), so memory stays bounded."""
        assert self.process is not None and self.process.stdout is not None
        out = self.process.stdout
        while line := out.readline(MESSAGE_LIMIT):
            if not line.endswith(b"\n"):
                if len(line) < MESSAGE_LIMIT:
                    break  # torn by rg's end (killed mid-write): `failure` says so
                while (rest := out.readline(MESSAGE_LIMIT)) and not rest.endswith(b"\n"):
                    pass
                if line.startswith(b'{"type":"match"'):
                    self._long_line(line)
                continue
            if line.startswith(b'{"type":"match"'):
                yield _parse_match(line)
        self._drained = True

    def _long_line(self, head: bytes) -> None:
        text = head.decode("utf-8", "replace")
        try:  # {"type":"match","data":{"path":{"text":...}: the path comes first
            data = json.JSONDecoder().raw_decode(text, text.index('"path":') + 7)[0]
            path = data.get("text") or os.fsdecode(_b64(data["bytes"]))
        except (ValueError, KeyError, AttributeError):
            return
        if not path.startswith("/"):
            path = self.root_prefix + path.removeprefix("./")
        shown = self._display(path)
        if shown not in self.long_lines:
            self.long_lines.append(shown)

    def _sorted(self) -> Iterator[_RawMatch]:
        """Every match rg finds, read to the end, ordered by path then line."""
        raws = list(self._stream())
        raws.sort(key=lambda r: (r.path, r.line))
        return iter(raws)

    def _accept(self, raw: _RawMatch) -> Match | None:
        if not raw.path.startswith("/"):  # rg ran in the root and was given relative paths
            raw.path = self.root_prefix + raw.path.removeprefix("./")
        if raw.path != self._owner_of[0]:  # a file's matches come together: look up once
            self._owner_of = (raw.path, self.selection.owner(raw.path))
        owner = self._owner_of[1]
        if owner is None or owner in self.selection.dropped:
            return None
        head = self._head(raw.path)
        if not self.options.include_frontmatter and raw.line <= head.frontmatter_end:
            return None
        counted = self._per_file.get(raw.path, 0)
        if counted >= self.options.per_file_limit:
            return None
        self._per_file[raw.path] = counted + 1
        return Match(self._display(raw.path), owner.label, raw.line, raw.text, raw.spans, head)

    def _head(self, path: str) -> FileHead:
        head = self._heads.get(path)
        if head is None:
            head = read_head(path, self.page_id_field)
            self._heads[path] = head
        return head

    def _display(self, path: str) -> str:
        shown = path[len(self.root_prefix) :] if path.startswith(self.root_prefix) else path
        if not shown.isascii():  # a name that is not UTF-8 prints with U+FFFD, not a crash
            shown = shown.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return shown


def start(
    options: GrepOptions,
    selection: Selection,
    project_root: Path,
    page_id_field: str = "page_id",
    rg: str | None = None,
    stderr=None,
) -> GrepRun:
    """A run over the selected roots; nothing is spawned until it is iterated."""
    if options.file_type not in TYPE_GLOBS:
        raise GrepError(f"unknown file type {options.file_type!r}; use {', '.join(FILE_TYPES)}")
    paths = search_paths(selection)
    if not paths:
        raise GrepError("no source folder to search: none of the configured roots exists here")
    rules = slot = None
    if selection.config is not None:
        from kernel.project_files import rg_rules

        rules = rg_rules(selection.config, paths)
        slot = IGNORE_FILE_SLOT if rules.ignore_lines else None
    argv = build_argv(rg or find_rg(), options, paths, rules, slot)
    run = GrepRun(argv, selection, project_root, options, page_id_field, stderr)
    if rules is not None:
        run.cwd, run.ignore_lines, run.warnings = rules.cwd, rules.ignore_lines, rules.problems
    return run


# In a built argv, where the descriptor of the translated .gitignore lines goes (the file is
# opened only when rg is spawned).
IGNORE_FILE_SLOT = "/dev/fd/{fd}"


def _rules_file(lines: list[str]):
    """An unlinked temp file holding `lines`, rewound, for rg to read through /dev/fd."""
    import tempfile

    handle = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it once rg runs
    handle.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    handle.flush()
    handle.seek(0)
    return handle


def _b64(data: str) -> bytes:
    """rg's encoding of a path or line that is not UTF-8 (rare: base64 loads only then)."""
    import base64

    return base64.b64decode(data)


def _parse_match(line: bytes) -> _RawMatch:
    data = json.loads(line)["data"]
    path_field = data["path"]
    path = path_field.get("text") or os.fsdecode(_b64(path_field["bytes"]))
    lines = data["lines"]
    raw_bytes = None if "text" in lines else _b64(lines["bytes"])
    text = lines["text"] if raw_bytes is None else raw_bytes.decode("utf-8", errors="replace")
    offsets = [(s["start"], s["end"]) for s in data["submatches"]]
    if not text.isascii():
        encoded = raw_bytes if raw_bytes is not None else text.encode("utf-8")
        offsets = [(_chars(encoded, s), _chars(encoded, e)) for s, e in offsets]
    return _RawMatch(path, data["line_number"], text.rstrip("\r\n"), offsets)


def _chars(encoded: bytes, byte_offset: int) -> int:
    return len(encoded[:byte_offset].decode("utf-8", errors="replace"))


# --- the head of a matched file -------------------------------------------------------------


def read_head(path: str, page_id_field: str = "page_id") -> FileHead:
    """Frontmatter line range, title and page id, reading no further than needed."""
    from kernel.safe_open import open_regular

    stem = os.path.basename(path).rsplit(".", 1)[0]
    try:
        # Binary: lines split on "\n" only, as rg counts them (a lone "\r" is not a break).
        # A regular file only (rg searched it; a FIFO swapped in since must not block).
        with open(open_regular(path, follow=True), "rb") as fh:
            lines = _decoded(fh)
            first = next(lines, "").lstrip("\ufeff")
            opener = first.strip()
            fm_end, fm_lines = 0, []
            if opener in ("---", "+++"):
                fm_end, fm_lines = _frontmatter_block(lines, opener)
            if fm_end:
                body = lines
            else:  # no frontmatter, or an unterminated one: the body starts at line 1
                fh.seek(0)
                body = _chain(first, _decoded(fh), skip=1)
            meta = _frontmatter_fields(fm_lines, ("title", page_id_field), toml=opener == "+++")
            title = meta.get("title") or first_heading(body) or stem
            return FileHead(fm_end, title, meta.get(page_id_field))
    except OSError:
        return FileHead(0, stem)


def _frontmatter_block(lines: Iterator[str], opener: str) -> tuple[int, list[str]]:
    """(line number of the closing delimiter, the lines between); (0, []) when unterminated."""
    closers = ("---", "...") if opener == "---" else ("+++",)
    block = []
    for number, line in enumerate(lines, start=2):
        if line.strip() in closers and not line[:1].isspace():
            return number, block
        block.append(line.rstrip("\r\n"))
    return 0, []


def _decoded(fh) -> Iterator[str]:
    """The file's lines, a long one in pieces of `HEAD_LINE_LIMIT` bytes."""
    while line := fh.readline(HEAD_LINE_LIMIT):
        yield line.decode("utf-8", errors="replace")


def _chain(first: str, rest: Iterator[str], skip: int = 0) -> Iterator[str]:
    """`first`, then `rest` minus its first `skip` lines (re-read from the start)."""
    yield first
    for number, line in enumerate(rest):
        if number >= skip:
            yield line


def first_heading(lines) -> str | None:
    """The first level-1 heading in the file's first lines, else the first heading of any level."""
    first_any = None
    previous = ""
    fence = ""
    for count, raw in enumerate(lines):
        if count >= HEAD_SCAN_LINES:
            break
        line = raw.rstrip("\r\n")
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if fence:
            if stripped.startswith(fence):
                fence = ""
            previous = ""
            continue
        if indent < 4 and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            previous = ""
            continue
        if indent < 4 and stripped.startswith("#"):
            hashes = len(stripped) - len(stripped.lstrip("#"))
            rest = stripped[hashes:]
            if hashes <= 6 and (not rest or rest[0] in " \t"):
                text = rest.strip().rstrip("#").strip()
                if hashes == 1 and text:
                    return text
                first_any = first_any or text or None
                previous = ""
                continue
        if indent < 4 and previous and stripped and set(stripped.rstrip()) <= {"=", "-"}:
            marker = stripped.rstrip()
            if len(set(marker)) == 1:
                if marker[0] == "=":
                    return previous.strip()
                first_any = first_any or previous.strip()
                previous = ""
                continue
        previous = line if line.strip() else ""
    return first_any


def _frontmatter_fields(lines: list[str], keys: tuple[str, ...], toml: bool) -> dict[str, str]:
    """Top-level scalar fields of a frontmatter block, without a YAML parser in the common case."""
    found: dict[str, str] = {}
    if not lines:
        return found
    separator = "=" if toml else ":"
    for line in lines:
        if not line or line[0] in " \t#-":
            continue
        key, sep, value = line.partition(separator)
        key = key.strip().strip("\"'")
        if not sep or key not in keys or key in found:
            continue
        value = value.strip()
        if not toml and (not value or value[0] in "|>&*!{["):
            parsed = _yaml_field(lines, key)  # block scalars and the like: ask a real parser
            if parsed:
                found[key] = parsed
            continue
        found[key] = _unquote(value)
    return {k: v for k, v in found.items() if v}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    if " #" in value:
        value = value.split(" #", 1)[0].rstrip()
    return value


def _yaml_field(lines: list[str], key: str) -> str | None:
    import yaml

    try:
        data = yaml.safe_load("\n".join(lines))
    except yaml.YAMLError:
        return None
    value = data.get(key) if isinstance(data, dict) else None
    if value is None or isinstance(value, dict | list):
        return None
    return " ".join(str(value).split())
