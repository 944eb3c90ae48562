"""Ingests killed with SIGKILL at random moments: the index must stay readable and sound.

Each round changes some files (edits, deletions, new files), starts `mdvdb ingest` (one in
five with --full) and kills it with SIGKILL after a random delay drawn over the length of an
unkilled ingest. After every kill the index must open and pass `status --verify`; after the
last, one normal ingest must give exactly what a clean full build of the same files gives
(file hashes, chunk hashes, texts, line ranges and vectors).

    python bench/crash_stress.py --kills 100 [--files 300] [--json]
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORDS = [
    "archive",
    "branch",
    "commit",
    "deploy",
    "editor",
    "folder",
    "gradient",
    "install",
    "kernel",
    "lambda",
]


def prepare(source: Path, root: Path, n_files: int) -> None:
    files = sorted(p for p in source.rglob("*.md") if p.is_file())[:n_files]
    for path in files:
        target = root / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def mutate(root: Path, rng: random.Random, round_no: int) -> None:
    files = sorted(p for p in root.rglob("*.md") if ".markdownvdb" not in str(p))
    for path in rng.sample(files, max(1, len(files) // 5)):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"\n## Round {round_no}\n\nNotes on {rng.choice(WORDS)} {rng.random()}.\n")
    for path in rng.sample(files, max(1, len(files) // 50)):
        path.unlink()
    for i in range(max(1, len(files) // 50)):
        new = root / "added" / f"r{round_no}-{i}.md"
        new.parent.mkdir(exist_ok=True)
        new.write_text(f"# Added {round_no} {i}\n\nAbout {rng.choice(WORDS)}.\n")


def ingest_cmd(root: Path, full: bool) -> list[str]:
    return [sys.executable, "-m", "mdvdb", "ingest", "--root", str(root), *(["--full"] * full)]


def verify(root: Path, cli: bool) -> list[str]:
    if cli:
        r = subprocess.run(
            [sys.executable, "-m", "mdvdb", "status", "--verify", "--root", str(root)],
            capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        return [] if r.returncode == 0 else [r.stderr.strip() or r.stdout.strip()]
    from query.verify import verify as check

    return check(root / ".markdownvdb.index", root).problems


def index_content(root: Path) -> tuple:
    """What must match between the recovered index and a clean build, in a canonical order
    (an incremental pack may append files where a full build sorts them)."""
    import numpy as np

    from kernel.index_format import read_index

    f = read_index(root / ".markdownvdb.index")
    files, chunks = f.tables["files"], f.tables["chunks"]
    paths = files.column("path").to_pylist()
    file_rows = sorted(
        zip(
            paths,
            files.column("sha256").to_pylist(),
            files.column("title").to_pylist(),
            files.column("frontmatter").to_pylist(),
            files.column("parse_error").to_pylist(),
            strict=True,
        )
    )
    ids = chunks.column("file_id").to_pylist()
    chunk_rows = list(
        zip(
            [paths[i] for i in ids],
            chunks.column("start_line").to_pylist(),
            chunks.column("end_line").to_pylist(),
            chunks.column("sha256").to_pylist(),
            chunks.column("text").to_pylist(),
            strict=True,
        )
    )
    order = sorted(range(len(chunk_rows)), key=lambda i: chunk_rows[i][:4])
    dims = int(f.meta["dimensions"])
    vectors = np.asarray(chunks.column("vector").combine_chunks().values).reshape(-1, dims)
    return file_rows, [chunk_rows[i] for i in order], vectors[order]


def compare_with_clean_build(root: Path) -> dict:
    import numpy as np

    clean = Path(tempfile.mkdtemp(prefix="mdvdb-clean-"))
    for path in root.rglob("*.md"):
        if ".markdownvdb" in str(path.relative_to(root)):
            continue
        target = clean / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    subprocess.run(ingest_cmd(clean, False), check=True, capture_output=True, cwd=REPO)
    a_files, a_chunks, a_vec = index_content(root)
    b_files, b_chunks, b_vec = index_content(clean)
    same_shape = a_vec.shape == b_vec.shape
    out = {
        "files_equal": a_files == b_files,
        "chunks_equal": a_chunks == b_chunks,
        "vectors_equal": bool(same_shape and np.array_equal(a_vec, b_vec)),
        "max_vector_diff": float(np.abs(a_vec - b_vec).max()) if same_shape and a_vec.size else 0,
        "files": len(a_files),
        "chunks": len(a_chunks),
    }
    shutil.rmtree(clean, ignore_errors=True)
    return out


def stress(source: Path, kills: int, n_files: int, seed: int = 1, cli_verify: bool = True) -> dict:
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="mdvdb-crash-"))
    prepare(source, root, n_files)
    started = time.perf_counter()
    subprocess.run(ingest_cmd(root, False), check=True, capture_output=True, cwd=REPO)
    baseline = time.perf_counter() - started
    killed = finished = 0
    failures: list[str] = []
    for round_no in range(1, kills + 1):
        mutate(root, rng, round_no)
        proc = subprocess.Popen(
            ingest_cmd(root, rng.random() < 0.2),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
        )  # fmt: skip
        time.sleep(rng.uniform(0.05, baseline * 1.1))
        proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        if code == -signal.SIGKILL:
            killed += 1
        else:
            finished += 1
        problems = verify(root, cli_verify)
        if problems:
            failures.append(f"round {round_no}: {problems}")
    final = subprocess.run(ingest_cmd(root, False), capture_output=True, text=True, cwd=REPO)
    if final.returncode != 0:
        failures.append(f"final ingest failed: {final.stderr.strip()[-300:]}")
    result = {
        "kills": kills,
        "killed_mid_run": killed,
        "finished_before_kill": finished,
        "baseline_ingest_s": round(baseline, 2),
        "verify_failures": len(failures),
        "failure_samples": failures[:3],
        **compare_with_clean_build(root),
        "leftover_temp_files": len(list(root.glob("..markdownvdb.index.*.tmp"))),
    }
    shutil.rmtree(root, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--corpus", default="tldr")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from bench.common import corpus, print_table

    result = stress(corpus(args.corpus), args.kills, args.files, args.seed)
    print_table("SIGKILLed ingests", [result], args.json)


if __name__ == "__main__":
    main()
