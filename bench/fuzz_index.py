"""Fuzz the index reader: mutate a real index (flipped bytes, truncation, a spliced run of
random bytes) and open, verify and search it in a child process, for a bounded time.

A finding is a child killed by a signal, or a Python error other than the one-line damage
error (`IndexFormatError`) from an index whose checksums pass, or a damaged index that
`verify` calls sound. With `atheris` installed (`pip install atheris`) the mutations are
coverage-guided (`--atheris`); otherwise a seeded random-mutation loop runs.

    python -m bench.fuzz_index --seconds 60 [--json] [--atheris]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--atheris", action="store_true", help="in-process, coverage-guided")
    args = parser.parse_args()
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
    row = {
        "mode": "random mutation",
        "runs": runs,
        "seconds": round(elapsed, 1),
        "findings": findings,
    }
    if args.json:
        print(json.dumps(row))
    else:
        print("| mode | runs | seconds | findings |\n|---|---|---|---|")
        print(f"| {row['mode']} | {runs} | {row['seconds']} | {len(findings)} |")
        for f in findings[:20]:
            print(f"finding: {f}")
    sys.exit(1 if findings else 0)


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
