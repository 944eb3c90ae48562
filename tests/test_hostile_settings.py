"""Every input bounded (docs/security.md, "Round two"): each numeric setting a folder's file
(or the environment) can give has a range declared in `kernel.config.SETTINGS`; a shard
count above the file count is clamped and an index of empty shards answers; the schema
overlay gets the frontmatter's YAML bounds; paths in settings are checked before use; a
folder-chosen endpoint that never answers is named while the ingest waits. Through the real
CLI in temp folders."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from kernel.config import SETTINGS, Number
from tests.conftest import run_cli

QUIET = {"MDVDB_CLUSTERING_ENABLED": "false", "MDVDB_NO_WARM": "1"}


def _cli(*args: str, env: dict | None = None):
    return run_cli(*args, env={**QUIET, **(env or {})})


def _one_line(result, code: int, *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _folder(root: Path, files: int = 1, config: str = "") -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nwords about topic{i} here\n")
    if config:
        (root / ".markdownvdb").write_text(config)
    return root


NUMERIC = [s for s in SETTINGS if isinstance(s.parse, Number)]


def test_every_numeric_setting_declares_a_range():
    """Each setting whose value is a number parses through `Number`, with a finite range:
    none is left to `int()` alone (MDVDB_SHARDS=100000 used to write 100,000 files)."""
    numeric_attrs = {
        "shards", "workers", "embedding_timeout", "embedding_batch_size", "chunk_max_tokens",
        "embedding_concurrency", "embedding_max_retries", "serve_idle_timeout",
    }  # fmt: skip
    declared = {s.attr for s in NUMERIC}
    assert numeric_attrs <= declared
    from kernel.config import Config

    for setting in SETTINGS:  # every int or float field of Config is a Number setting
        default = Config.__dataclass_fields__[setting.attr].default
        if isinstance(default, int | float) and not isinstance(default, bool):
            # MDVDB_SEARCH_DECAY: a duration, bounded by kernel.dates (0 < d <= 100y)
            assert setting in NUMERIC or setting.env == "MDVDB_SEARCH_DECAY", setting.env
    for setting in NUMERIC:
        assert setting.parse.high < 10**10 and setting.parse.low > -(10**10), setting.env


@pytest.mark.parametrize("setting", NUMERIC, ids=[s.env for s in NUMERIC])
def test_out_of_range_values_are_refused_naming_the_setting(tmp_path: Path, setting):
    """Above the range, below it, a 5,000-digit number: a ConfigError naming the setting
    and the file (what every command turns into one line, exit 2: below)."""
    from kernel.config import ConfigError, load_config

    number = setting.parse
    (tmp_path / ".markdownvdb").write_text("")
    above = number.high * 10 + 1 if number.kind is float else int(number.high) + 1
    for raw in (str(above), str(number.low - 1), "9" * 5000):
        (tmp_path / ".markdownvdb").write_text(f"{setting.env}={raw}\n")
        with pytest.raises(ConfigError, match=setting.env) as refused:
            load_config(tmp_path, environ={})
        assert ".markdownvdb" in str(refused.value)
        assert "set_int_max_str_digits" not in str(refused.value)
        assert "9" * 50 not in str(refused.value)  # a huge value is not echoed back


def test_a_hundred_thousand_shards_from_a_folder_is_one_line_at_once(tmp_path: Path):
    root = _folder(tmp_path / "notes", 2, "MDVDB_SHARDS=100000\n")
    started = time.monotonic()
    done = _cli("ingest", "--root", str(root))
    _one_line(done, 2, "MDVDB_SHARDS", "between 1 and 1,024", ".markdownvdb")
    assert time.monotonic() - started < 30  # the interpreter's start; it was 60 s and 3.5 GB
    assert not (root / ".markdownvdb.index.shards").exists()
    for args in (("search", "topic1"), ("status",)):
        _one_line(_cli(*args, "--root", str(root)), 2, "MDVDB_SHARDS")


def test_an_endless_timeout_from_a_folder_is_refused(tmp_path: Path):
    root = _folder(
        tmp_path / "notes",
        1,
        "MDVDB_EMBEDDING_PROVIDER=custom\nMDVDB_EMBEDDING_ENDPOINT=http://127.0.0.1:9/v1\n"
        "MDVDB_EMBEDDING_TIMEOUT=1e8\n",
    )
    _one_line(_cli("ingest", "--root", str(root)), 2, "MDVDB_EMBEDDING_TIMEOUT", "at most 600")


@pytest.mark.slow
def test_an_endpoint_that_never_answers_is_named_while_the_ingest_waits(tmp_path: Path):
    """A folder's endpoint that accepts and never answers: a line naming it at each timed
    out attempt (not minutes of silence), then the one-line error, exit 1, no index."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])  # read nothing, answer nothing
            except OSError:
                pass

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    root = _folder(
        tmp_path / "notes",
        1,
        "MDVDB_EMBEDDING_PROVIDER=custom\n"
        f"MDVDB_EMBEDDING_ENDPOINT=http://127.0.0.1:{port}/v1/embeddings\n"
        "MDVDB_EMBEDDING_TIMEOUT=1\nMDVDB_EMBEDDING_MAX_RETRIES=1\nMDVDB_EMBEDDING_RETRY_DELAY=0\n",
    )
    try:
        done = _cli("ingest", "--root", str(root))
    finally:
        stop.set()
        thread.join(5)
        for sock in held:
            sock.close()
        listener.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("mdvdb: custom:") and f"127.0.0.1:{port}" in lines[0]
    assert "gave no answer within 1 s" in lines[0] and "(2 of 2 attempts)" in lines[0]
    assert "no answer within 1 s" in lines[-1] and len(lines) == 2
    assert not (root / ".markdownvdb.index").exists()


def _paths(report: str) -> list[str]:
    data = json.loads(report)
    return [r["path"] for r in data.get("results", data.get("files"))]


def test_a_shard_count_above_the_file_count_is_clamped_and_search_works(tmp_path: Path):
    """MDVDB_SHARDS=2 in a folder of one file: the manifest says 1 shard (was: 2, one of
    them empty, and every search a KeyError while `status --verify` said ok)."""
    root = _folder(tmp_path / "notes", 1, "MDVDB_SHARDS=2\n")
    assert _cli("ingest", "--root", str(root)).returncode == 0
    manifest = json.loads((root / ".markdownvdb.index.shards" / "manifest.json").read_text())
    assert manifest["shards"] == 1
    found = _cli("search", "topic0", "--json", "--root", str(root))
    assert found.returncode == 0, found.stderr
    assert _paths(found.stdout) == ["n0.md"]
    assert _cli("status", "--verify", "--root", str(root)).returncode == 0


@pytest.mark.slow
def test_an_empty_shard_answers_every_query(tmp_path: Path):
    """Two files that hash to the same one of two shards (n0.md and n1.md both go to
    shard 1): the other shard is empty, and every kind of query still answers as the
    one-file index of the same folder does."""
    from kernel.shards import shard_of

    assert shard_of("n0.md", 2) == shard_of("n1.md", 2)  # the premise
    sharded = _folder(tmp_path / "sharded", 2, "MDVDB_SHARDS=2\n")
    single = _folder(tmp_path / "single", 2)
    for root in (sharded, single):
        (root / "n0.md").write_text("---\ntags: [x]\n---\n# Note 0\n\nwords about topic0\n")
        assert _cli("ingest", "--root", str(root)).returncode == 0
    manifest = json.loads((sharded / ".markdownvdb.index.shards" / "manifest.json").read_text())
    assert manifest["shards"] == 2 and sorted(e["files"] for e in manifest["files"]) == [0, 2]
    for query in (
        ("search", "words topic", "--json"),
        ("search", "words", "--mode", "lexical", "--json"),
        ("search", "words", "--mode", "semantic", "--json"),
        ("search", "words", "--tag", "x", "--json"),
        ("search", "--files", "words", "--json"),
        ("get", "n1.md", "--json"),
        ("schema", "--json"),
    ):
        one, many = (_cli(*query, "--root", str(r)) for r in (single, sharded))
        assert many.returncode == 0 and "Traceback" not in many.stderr, (query, many.stderr)
        assert json.loads(one.stdout).keys() == json.loads(many.stdout).keys()
        if query[0] == "search":
            assert _paths(many.stdout) == _paths(one.stdout), query
    assert _cli("status", "--verify", "--root", str(sharded)).returncode == 0


def test_the_schema_overlay_gets_the_frontmatters_yaml_bounds(tmp_path: Path):
    """A ~400-byte alias bomb under `fields:` (53 s and 11 GB per ingest, then a
    traceback): refused at once with one line naming the overlay; ingest goes on, exit 0,
    and `schema` says the overlay is ignored and why."""
    root = _folder(tmp_path / "notes", 3)
    bomb = ["fields:", "  a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    bomb += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    text = "\n".join(bomb) + "\n"
    assert len(text) < 500
    (root / ".markdownvdb.schema.yml").write_text(text)
    started = time.monotonic()
    done = _cli("ingest", "--json", "--root", str(root))
    assert time.monotonic() - started < 30
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["files"] == 3
    problems = [p for p in report["errors"] if p["path"] == ".markdownvdb.schema.yml"]
    assert len(problems) == 1 and "expands to more than 20000 values" in problems[0]["problem"]
    schema = _cli("schema", "--root", str(root))
    assert "overlay ignored" in schema.stdout and "aliases" in schema.stdout
    assert _paths(_cli("search", "topic2", "--json", "--root", str(root)).stdout)[0] == "n2.md"


def test_the_overlay_parser_refuses_every_bound_quickly():
    """The overlay reader on each bound (the fuzz target's cases): recursion, depth, size,
    a 5,000-digit number; each an OverlayError, none a hang or another exception."""
    from pipeline.schema import OverlayError, parse_overlay

    cases = [
        b"fields: &a [*a]\n",
        b"fields:\n  x: " + b"[" * 40 + b"]" * 40 + b"\n",
        b"fields:\n  x: '" + b"a" * 200_000 + b"'\n",
        b"fields:\n  x:\n    allowed: [" + b"9" * 5000 + b"]\n",
        b"fields: " + b"[" * 100_000 + b"\n",
        b"fields: {}\n2: r\n",  # keys of two types (sorting them was a TypeError; atheris)
    ]
    started = time.monotonic()
    for raw in cases:
        with pytest.raises(OverlayError) as refused:
            parse_overlay(raw)
        assert "set_int_max_str_digits" not in str(refused.value)
    assert time.monotonic() - started < 5


def test_a_deep_missing_source_folder_costs_linear_time(tmp_path: Path):
    """MDVDB_SOURCE_DIRS naming 1,600 levels of a folder that does not exist took 56 s (the
    ignore rules of every prefix, each from the top); a path past PATH_MAX or a part past
    NAME_MAX is refused before any work, and a NUL is one line, not a traceback."""
    deep = "/".join(["a"] * 1600)
    root = _folder(tmp_path / "notes", 1, f"MDVDB_SOURCE_DIRS=.,{deep}\n")
    (root / ".gitignore").write_text("*.tmp\n")
    started = time.monotonic()
    assert _cli("ingest", "--root", str(root)).returncode == 0
    assert time.monotonic() - started < 30
    for value, needle in (
        ("/".join(["a"] * 3000), "4096"),
        ("x" * 300, "255"),
    ):
        (root / ".markdownvdb").write_text(f"MDVDB_SOURCE_DIRS={value}\n")
        _one_line(_cli("ingest", "--root", str(root)), 2, "MDVDB_SOURCE_DIRS", needle)
    (root / ".markdownvdb").write_text("MDVDB_INDEX_FILE=idx\x00.index\n")
    _one_line(_cli("status", "--root", str(root)), 2, "MDVDB_INDEX_FILE", "NUL")


def test_an_overlay_and_config_reader_never_raise_anything_else(tmp_path: Path):
    """`.markdownvdb` with garbage lines, odd quoting and huge values: settings it names are
    refused by name (ConfigError), everything else ignored; never another exception."""
    import random

    from kernel.config import ConfigError, load_config

    rng = random.Random(7)
    names = [s.env for s in SETTINGS]
    for _ in range(200):
        lines = []
        for _ in range(rng.randrange(1, 6)):
            key = rng.choice([*names, "MDVDB_X", "export " + rng.choice(names), "=", ""])
            value = rng.choice(["", "nan", "-1", "1e999", "9" * 50, "'a", '"x"', "\x00", "é"])
            lines.append(f"{key}={value}")
        (tmp_path / ".markdownvdb").write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            load_config(tmp_path, environ={})
        except ConfigError as exc:
            assert "\n" not in str(exc)


@pytest.mark.slow
def test_every_out_of_range_setting_is_one_line_exit_2_from_the_cli(tmp_path: Path):
    """The end-to-end form of the in-process test above, one process per setting."""
    root = _folder(tmp_path / "notes", 1)
    for setting in NUMERIC:
        above = int(setting.parse.high) + 1
        done = _cli("status", "--root", str(root), env={setting.env: str(above)})
        _one_line(done, 2, setting.env, "(from the environment)")
