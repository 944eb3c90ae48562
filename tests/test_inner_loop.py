"""The inner loop's scheduling (tests/conftest.py): under xdist the files go out costliest
first, each file's tests kept together and in their order (a module fixture is built once
per worker only if its file stays in one unit)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import DEFAULT_FILE_CPU, FILE_CPU, by_cost


def test_files_go_out_costliest_first_and_whole():
    costly = max(FILE_CPU, key=FILE_CPU.get)
    cheap = min(FILE_CPU, key=FILE_CPU.get)
    assert FILE_CPU[cheap] > DEFAULT_FILE_CPU  # a listed file goes before any unlisted one
    order = [
        "tests/test_unlisted.py::test_a",
        f"{cheap}::test_b",
        "tests/test_unlisted.py::test_c",
        f"{costly}::test_d[1]",
        f"{cheap}::test_e",
        f"{costly}::test_d[2]",
        "tests/test_other_unlisted.py::test_f",
    ]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in order]
    by_cost(items)
    assert [item.nodeid for item in items] == [
        f"{costly}::test_d[1]",
        f"{costly}::test_d[2]",
        f"{cheap}::test_b",
        f"{cheap}::test_e",
        "tests/test_unlisted.py::test_a",
        "tests/test_unlisted.py::test_c",
        "tests/test_other_unlisted.py::test_f",
    ]
