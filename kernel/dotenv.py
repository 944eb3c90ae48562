"""The `.markdownvdb` file format and root discovery, with nothing but `os` imported.

Shared by `kernel.config` and the warm-path client (`mdvdb.cli.warm`), which runs before
anything else on every forwarded CLI call and cannot afford dataclasses or pathlib (~20 ms).
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
    """A `.markdownvdb` file's text, None when there is none. Never through a symlink, never
    a FIFO or a device, at most 1 MiB (`kernel.safe_open.read_own`: OSError saying why);
    UnicodeDecodeError when it is not UTF-8."""
    from kernel.safe_open import read_own

    raw = read_own(path)
    return None if raw is None else raw.decode("utf-8-sig")


def find_root(start: str) -> str:
    """The nearest folder upward holding `.markdownvdb` (anything of that name but a folder:
    one that cannot be read is then refused in one line, not passed over), else the
    starting folder."""
    here = os.path.realpath(start)
    folder = here
    while True:
        if _marks_root(os.path.join(folder, CONFIG_FILE)):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return here
        folder = parent


def _marks_root(path: str) -> bool:
    try:
        return not os.path.isdir(path) and os.path.lexists(path)
    except OSError:
        return False
