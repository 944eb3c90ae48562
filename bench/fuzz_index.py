"""Fuzz the readers of untrusted bytes, for a bounded time.

`--target index` (the default): mutate a real index (flipped bytes, truncation, a spliced
run of random bytes) and open, verify and search it in a child process. A finding is a child
killed by a signal, or a Python error other than the one-line damage error
(`IndexFormatError`) from an index whose checksums pass, or a damaged index that `verify`
calls sound.

`--target warm | config | overlay`: the warm socket's decoder (`mdvdb.cli.warm_wire`), a
folder's `.markdownvdb` (`kernel.config.load_config`) and the schema overlay
(`pipeline.schema.parse_overlay`), each on mutations of real inputs spliced with hostile
tokens (a marshal bomb, YAML aliases, 5,000 digits, NUL). They run in this process: a
finding is any exception but the reader's own one-line error (`WireError`, `ConfigError`,
`OverlayError`), a case that takes more than `CASE_SECONDS`, or for the decoder a value
that does not survive a round trip.

With `atheris` installed (`pip install atheris`) the mutations are coverage-guided
(`--atheris`); otherwise a seeded random-mutation loop runs.

    python -m bench.fuzz_index --seconds 60 [--target warm] [--json] [--atheris]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import os, sys
from kernel import index_format
from query import open_index
from query.verify import verify
root = sys.argv[1]
damaged = sys.argv[2] == "1"
ok = verify(os.path.join(root, ".markdownvdb.index"), root).ok
if damaged and ok:
    print("UNDETECTED"); sys.exit(3)
try:
    index = open_index(root)
    index.search("tar archive", limit=5)
    index.search("network", limit=5, mode="lexical")
    index.get_document("page001.md")
    index.status()
except index_format.IndexFormatError:
    pass
except Exception as exc:
    if not index_format.damage_message():
        raise
"""


def build(folder: Path) -> bytes:
    from tests.test_index_damage import _pages

    root = _pages(folder / "notes", 20)
    env = {**os.environ, "MDVDB_CLUSTERING_ENABLED": "false"}
    subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--root", str(root)],
        env=env,
        check=True,
        capture_output=True,
    )
    return (root / ".markdownvdb.index").read_bytes()


def mutate(clean: bytes, rng: random.Random) -> bytes:
    data = bytearray(clean)
    kind = rng.choice(["flip", "flip", "truncate", "splice"])
    if kind == "flip":
        for _ in range(rng.randint(1, 40)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        data = data[: rng.randrange(len(data))]
    else:
        at = rng.randrange(len(data))
        data[at : at + 16] = os.urandom(16)
    return bytes(data)


def run_child(root: Path, data: bytes, clean: bytes) -> str | None:
    (root / ".markdownvdb.index").write_bytes(data)
    env = {**os.environ, "MDVDB_CLUSTERING_ENABLED": "false", "MDVDB_NO_WARM": "1"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), "1" if data != clean else "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if result.returncode < 0:
        return f"signal {-result.returncode}"
    if result.returncode == 3:
        return "damage not detected by verify"
    if result.returncode:
        return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "exit code"
    return None


# -- the readers of a folder's small files and of the warm socket ----------------------------

CASE_SECONDS = 2.0  # an in-process case slower than this is a finding (a hang, a blow-up)
HOSTILE = [
    b"[[[[[[[[[[N",
    b"MDW1\xff\xff\xff\xff",
    b"l\x5b\x5b\x5b\x5b",
    b"\x00",
    b"9" * 5000,
    b"&a [*a, *a]",
    b"*a",
    b"[" * 64,
    b"!!python/object:os.system",
    b"\xff\xfe",
    b"\r\n",
    b"=",
    b"'",
    b"1e999",
    b"nan",
    b"-1",
]
CONFIG_SEED = (
    b"# a folder's settings\nMDVDB_SOURCE_DIRS=docs,notes\nMDVDB_SHARDS=4\n"
    b"export MDVDB_EMBEDDING_TIMEOUT='30'\nMDVDB_WORKERS=2 # comment\n"
    b'MDVDB_GOVERN_WEIGHTS="high=1.1,low=0.9"\nMDVDB_CHUNK_MAX_TOKENS=300\n'
    b"MDVDB_SEARCH_MIN_SCORE=0.1\nMDVDB_INDEX_FILE=idx.index\n"
)
OVERLAY_SEED = (
    b"fields:\n  status:\n    description: where the page stands\n    type: string\n"
    b"    allowed: [draft, done]\n    required: true\n  tags: a list of words\n"
    b"  rating: {type: number}\n  base: &b {type: string}\n  other: *b\n"
)


def wire_seeds() -> list[bytes]:
    from mdvdb.cli.warm_wire import encode

    return [
        encode({"argv": ["search", "tar", "-n", "3"], "cwd": "/x", "env": {"MDVDB_A": "1"}}),
        encode({"stdout": "out\n", "stderr": "", "code": 0, "uptime": 1.5, "x": [None, True]}),
        encode({"op": "ping"}),
    ]


def hostile_mutation(seed: bytes, rng: random.Random) -> bytes:
    """`seed` with a few flips, cuts, random runs and hostile tokens spliced in."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(["flip", "cut", "random", "token", "token", "repeat"])
        at = rng.randrange(len(data) + 1)
        if kind == "flip" and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif kind == "cut":
            del data[at : at + rng.randint(1, 64)]
        elif kind == "random":
            data[at:at] = os.urandom(rng.randint(1, 32))
        elif kind == "token":
            data[at:at] = rng.choice(HOSTILE)
        else:
            data[at:at] = bytes(data[at : at + 16]) * rng.randint(2, 200)
    return bytes(data)


def _check_warm(data: bytes) -> None:
    """The bytes as sent, and with their header's length put right (so that mutations of
    the body reach the decoder's inner checks, not only the length's)."""
    from mdvdb.cli.warm_wire import HEADER, MAGIC, WireError, decode, encode

    body = data[HEADER:]
    for message in (data, MAGIC + len(body).to_bytes(4, "big") + body):
        try:
            value = decode(message, 1 << 20)
        except WireError:
            continue
        again = encode(value)  # bytes compared, not values: a NaN is not equal to itself
        if encode(decode(again, 1 << 20)) != again:
            raise AssertionError("a decoded value does not survive a round trip")


def _check_config(data: bytes, folder: Path) -> None:
    from kernel.config import ConfigError, load_config

    (folder / ".markdownvdb").write_bytes(data)
    try:
        load_config(folder, environ={})
    except ConfigError as exc:
        if "\n" in str(exc):
            raise AssertionError("a ConfigError of more than one line") from None


def _check_overlay(data: bytes) -> None:
    from pipeline.schema import OverlayError, parse_overlay

    try:
        parse_overlay(data)
    except OverlayError:
        pass


def small_reader(target: str, folder: Path):
    """(check(data) raising on a finding, the seeds to mutate) for a small-input target."""
    if target == "warm":
        return _check_warm, wire_seeds()
    if target == "config":
        return (lambda data: _check_config(data, folder)), [CONFIG_SEED]
    return _check_overlay, [OVERLAY_SEED]


def run_small(target: str, folder: Path, seconds: float, seed: int) -> tuple[int, list[str]]:
    """The random-mutation loop of a small-input target, in this process."""
    check, seeds = small_reader(target, folder)
    rng = random.Random(seed)
    started, runs, findings = time.monotonic(), 0, []
    while time.monotonic() - started < seconds:
        data = hostile_mutation(rng.choice(seeds), rng)
        began = time.monotonic()
        try:
            check(data)
        except Exception as exc:  # noqa: BLE001 - every other exception is a finding
            findings.append(f"{type(exc).__name__}: {str(exc)[:200]} on {data[:60]!r}")
        if time.monotonic() - began > CASE_SECONDS:
            findings.append(f"slow: {time.monotonic() - began:.1f} s on {data[:60]!r}")
        runs += 1
    return runs, findings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--atheris", action="store_true", help="in-process, coverage-guided")
    parser.add_argument("--target", choices=("index", "warm", "config", "overlay"), default="index")
    args = parser.parse_args()
    if args.target != "index":
        return main_small(args)
    with tempfile.TemporaryDirectory() as tmp:
        clean = build(Path(tmp))
        root = Path(tmp) / "notes"
        if args.atheris:
            return run_atheris(root, clean, args.seconds)
        rng = random.Random(args.seed)
        started, runs, findings = time.monotonic(), 0, []
        while time.monotonic() - started < args.seconds:
            data = mutate(clean, rng)
            problem = run_child(root, data, clean)
            runs += 1
            if problem:
                findings.append(problem)
        elapsed = time.monotonic() - started
    report("index", runs, elapsed, findings, args.json)


def main_small(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if args.atheris:
            return run_atheris_small(args.target, Path(tmp), args.seconds)
        started = time.monotonic()
        runs, findings = run_small(args.target, Path(tmp), args.seconds, args.seed)
    report(args.target, runs, time.monotonic() - started, findings, args.json)


def report(target: str, runs: int, elapsed: float, findings: list[str], as_json: bool) -> None:
    row = {
        "target": target,
        "mode": "random mutation",
        "runs": runs,
        "seconds": round(elapsed, 1),
        "findings": findings,
    }
    if as_json:
        print(json.dumps(row))
    else:
        print("| target | mode | runs | seconds | findings |\n|---|---|---|---|---|")
        print(f"| {target} | {row['mode']} | {runs} | {row['seconds']} | {len(findings)} |")
        for f in findings[:20]:
            print(f"finding: {f}")
    sys.exit(1 if findings else 0)


def run_atheris_small(target: str, folder: Path, seconds: float) -> None:
    """Coverage-guided, in-process, on the raw bytes atheris makes (and on mutations of the
    seeds, which atheris' corpus starts from)."""
    import atheris

    with atheris.instrument_imports():
        import kernel.config  # noqa: F401
        import mdvdb.cli.warm_wire  # noqa: F401
        import pipeline.schema  # noqa: F401

    check, seeds = small_reader(target, folder)
    corpus = folder / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(seeds):
        (corpus / f"seed{i}").write_bytes(seed)
    atheris.Setup([sys.argv[0], f"-max_total_time={int(seconds)}", str(corpus)], check)
    atheris.Fuzz()


def run_atheris(root: Path, clean: bytes, seconds: float) -> None:
    """Coverage-guided, in-process: a signal ends the run with atheris' crash report."""
    import atheris

    with atheris.instrument_imports():
        from kernel import index_format
        from query.verify import verify

    path = root / ".markdownvdb.index"

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        mutated = bytearray(clean)
        for _ in range(fdp.ConsumeIntInRange(1, 16)):
            mutated[fdp.ConsumeIntInRange(0, len(mutated) - 1)] ^= fdp.ConsumeIntInRange(1, 255)
        if fdp.ConsumeBool():
            mutated = mutated[: fdp.ConsumeIntInRange(0, len(mutated))]
        if bytes(mutated) == clean:
            return
        path.write_bytes(bytes(mutated))
        assert not verify(path, root).ok, "damage not detected by verify"
        try:
            index = index_format.read_index(path)
            for table in index.tables.values():
                table.to_pylist()
        except index_format.IndexFormatError:
            pass
        except Exception:
            if not index_format.damage_message():
                raise

    atheris.Setup([sys.argv[0], f"-max_total_time={int(seconds)}"], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
