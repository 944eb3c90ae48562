"""The `.markdownvdb` file format and root discovery, with nothing but `os` imported: the
warm-path client (`mdvdb.cli.warm`) reads it before anything else on a forwarded call.
"""

from __future__ import annotations

import os

CONFIG_FILE = ".markdownvdb"


def parse_dotenv(text: str) -> dict[str, str]:
    """KEY=VALUE lines; `#` comments, `export KEY=...` and quoted values are accepted."""
    values: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if key.startswith("export "):
            key = key[len("export ") :].strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def read_file(path: str | os.PathLike) -> str | None:
    """A `.markdownvdb` file's text, None when there is none, read as `safe_open.read_own`
    reads; UnicodeDecodeError when it is not UTF-8."""
    from kernel.safe_open import read_own

    raw = read_own(path)
    return None if raw is None else raw.decode("utf-8-sig")


DEFAULT_INDEX_FILE = ".markdownvdb.index"


def project_markers() -> tuple[str, ...]:
    """The names that make a folder a project: `.markdownvdb`, the index (`MDVDB_INDEX_FILE`
    when inside the root) and a sharded index's folder."""
    index = os.environ.get("MDVDB_INDEX_FILE", "").strip() or DEFAULT_INDEX_FILE
    if os.path.isabs(index) or os.pardir in index.replace("\\", "/").split("/"):
        index = DEFAULT_INDEX_FILE  # an index outside the root marks no folder
    return (CONFIG_FILE, index, index + ".shards")


def find_root(start: str) -> str:
    """The nearest folder upward from `start` that is a project (`project_markers`), else
    `start`; never the user's home from below it, nor across file systems."""
    here = os.path.realpath(start)
    home = os.path.realpath(os.path.expanduser("~"))
    device = _device(here)
    markers = project_markers()
    folder = here
    while True:
        config, index, shards = (os.path.join(folder, name) for name in markers)
        if _marks_root(config) or os.path.isfile(index) or os.path.isdir(shards):
            return folder
        parent = os.path.dirname(folder)
        if parent in (folder, home) or _device(parent) != device:
            return here
        folder = parent


def _marks_root(path: str) -> bool:
    try:
        return not os.path.isdir(path) and os.path.lexists(path)
    except OSError:
        return False


def _device(folder: str) -> int | None:
    try:
        return os.stat(folder).st_dev
    except OSError:
        return None
