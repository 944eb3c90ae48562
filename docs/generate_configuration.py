"""Write the settings table of docs/configuration.md from `kernel.config.SETTINGS`.

    python docs/generate_configuration.py          # rewrite the table in place
    python docs/generate_configuration.py --check  # exit 1 when the file is not current

tests/test_docs.py runs the check, so a setting added or changed in kernel/config.py
without running this fails the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PAGE = REPO / "docs" / "configuration.md"
BEGIN = (
    "<!-- settings: generated from kernel/config.py's SETTINGS by "
    "`python docs/generate_configuration.py`; edit them there -->"
)
END = "<!-- end of the generated settings -->"


def table() -> str:
    from kernel.config import SETTINGS

    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for setting in SETTINGS:
        default = "" if setting.default in (None, "") else f"`{setting.default}`"
        text = setting.help.replace("|", "\\|")
        rows.append(f"| `{setting.env}` | {default} | {text} |")
    return "\n".join(rows)


def generated(page: str) -> str:
    """`page` with the text between the markers replaced by the current table."""
    head, found, rest = page.partition(BEGIN)
    if not found or END not in rest:
        raise SystemExit(f"{PAGE}: the markers of the generated table are missing")
    return f"{head}{BEGIN}\n{table()}\n{END}{rest.split(END, 1)[1]}"


def main() -> int:
    page = PAGE.read_text(encoding="utf-8")
    current = generated(page)
    if "--check" in sys.argv[1:]:
        if current != page:
            print(f"{PAGE} is not current: run python docs/generate_configuration.py")
            return 1
        return 0
    PAGE.write_text(current, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
