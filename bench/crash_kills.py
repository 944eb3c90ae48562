"""SIGKILLs at random moments of every command that writes the index: each leaves no
process behind, the folder free, and an index that verifies and equals a clean build.

Commands: `ingest` (after an edit), `ingest --full` (1,000 files and MDVDB_WORKERS=2: the
worker pool runs), `watch`, `serve` and `mcp` (their watcher's first pass indexes the edit).
Each round switches the folder between two versions (A: the pages as copied; B: 2 % of them
edited, 1 % deleted, 1 % added), starts one command and SIGKILLs it after a random delay
drawn over the length of its unkilled work. Then:

- left processes: every process the command started (forked workers, the clustering
  helper...) carries a mark in its environment; any still alive 5 s
  after the kill counts (and is killed so the bench goes on);
- locked folders: a lock on `writer.lock` in /proc/locks then, or `mdvdb ingest --no-wait`
  failing (it exits 1 at once when another writer holds the lock);
- unverifiable indexes: `mdvdb status --verify` failing after that ingest;
- differences from a clean build: the index's files, chunks and vectors (bit for bit,
  `bench/crash_stress.index_content`) against a clean build of the same version.

    python bench/crash_kills.py --kills 100 [--files 1000] [--seed 1] [--command C]... [--json]
"""

from __future__ import annotations

import argparse
import os
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

COMMANDS = {
    "ingest": ["ingest"],
    "ingest --full": ["ingest", "--full"],
    "watch": ["watch"],
    "serve": ["serve"],
    "mcp": ["mcp"],
}
MARK = "MDVDB_CRASH_KILLS_MARK"
# Seconds a killed command's processes get to die before they count as left behind.
GRACE_S = 5.0


def mdvdb(*args: str) -> list[str]:
    return [sys.executable, "-m", "mdvdb", *args]


def quiet_env() -> dict[str, str]:
    """The environment of every command run here (no mark: the checks are not counted)."""
    env = {k: v for k, v in os.environ.items() if k != MARK}
    env["MDVDB_WORKERS"] = "2"
    return env


def versions(source: Path, root: Path, n_files: int, seed: int) -> dict[str, tuple]:
    """Copy `n_files` pages of `source` into `root` (version A); per path, its bytes in
    version A and in version B (None: absent)."""
    rng = random.Random(seed)
    pages = sorted(p for p in source.rglob("*.md") if p.is_file())[:n_files]
    for path in pages:
        target = root / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    rels = [p.relative_to(source).as_posix() for p in pages]
    diff: dict[str, tuple] = {}
    for rel in rng.sample(rels, max(1, n_files // 50)):
        a = (root / rel).read_bytes()
        diff[rel] = (a, a + f"\n## Version B\n\nNotes on {rng.random()}.\n".encode())
    for rel in rng.sample([r for r in rels if r not in diff], max(1, n_files // 100)):
        diff[rel] = ((root / rel).read_bytes(), None)
    for i in range(max(1, n_files // 100)):
        diff[f"added/b-{i}.md"] = (None, f"# Added {i}\n\nA page about {rng.random()}.\n".encode())
    return diff


def switch(root: Path, diff: dict[str, tuple], version: int) -> None:
    for rel, contents in diff.items():
        path = root / rel
        data = contents[version]
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def clean_build(root: Path, diff: dict[str, tuple], version: int) -> Path:
    """A fresh folder holding `version`'s pages, built by one plain ingest."""
    clean = Path(tempfile.mkdtemp(prefix=f"mdvdb-clean-{'AB'[version]}-"))
    for path in root.rglob("*.md"):
        if not path.relative_to(root).as_posix().startswith(".markdownvdb"):
            target = clean / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    switch(clean, diff, version)
    build = mdvdb("ingest", "--root", str(clean))
    subprocess.run(build, check=True, capture_output=True, env=quiet_env())
    return clean


def marked(mark: str) -> list[int]:
    """Live processes started with `mark` in their environment."""
    needle = f"\0{MARK}={mark}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in b"\0" + fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def lock_holders(root: Path) -> int:
    """Locks on the folder's writer lock, as /proc/locks lists them."""
    try:
        inode = os.stat(root / ".markdownvdb.state" / "writer.lock").st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return 0
    # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" (a waiter's line has a "->" more)
    return sum(1 for line in lines if any(t.endswith(f":{inode}") for t in line.split()))


def start(root: Path, name: str, mark: str) -> subprocess.Popen:
    env = {**quiet_env(), MARK: mark}
    return subprocess.Popen(
        mdvdb(*COMMANDS[name], "--root", str(root)),
        stdin=subprocess.PIPE,  # `mcp` serves stdio: an open stdin it never reads from
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )


def fresh(root: Path) -> bool:
    check = mdvdb("status", "--check", "--root", str(root))
    return subprocess.run(check, capture_output=True, env=quiet_env()).returncode == 0


def baseline(root: Path, name: str, diff: dict[str, tuple], version: int) -> float:
    """Seconds the command takes, unkilled, to index the switch to `version`."""
    switch(root, diff, version)
    started = time.perf_counter()
    proc = start(root, name, f"{os.getpid()}-baseline")
    if name.startswith("ingest"):
        proc.wait()
    else:
        while not fresh(root) and time.perf_counter() - started < 600:
            time.sleep(0.2)
    took = time.perf_counter() - started
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    return took


def one_kill(root: Path, name: str, delay: float, mark: str) -> dict:
    """Start `name`, SIGKILL it after `delay` s; what it left."""
    proc = start(root, name, mark)
    time.sleep(delay)
    mid_run = proc.poll() is None
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + GRACE_S
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = marked(mark)
    names = [_described(pid) for pid in left]
    for pid in left:  # so that the next rounds are not theirs
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {"mid_run": mid_run, "left": len(left), "left_names": names, "locks": lock_holders(root)}


def _described(pid: int) -> str:
    """`pid (state) its command line`, for the report of what a kill left."""
    try:
        argv = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return f"{pid} (gone)"
    return f"{pid} ({state}) {argv[:160]}"


def check_after(root: Path, reference: Path) -> dict:
    from bench.crash_stress import index_content

    env = quiet_env()
    ingest = subprocess.run(
        mdvdb("ingest", "--no-wait", "--root", str(root)), capture_output=True, env=env
    )
    verify = subprocess.run(
        mdvdb("status", "--verify", "--root", str(root)), capture_output=True, env=env
    )
    same = False
    if ingest.returncode == 0:
        import numpy as np

        a_files, a_chunks, a_vec = index_content(root)
        b_files, b_chunks, b_vec = index_content(reference)
        same = (
            a_files == b_files
            and a_chunks == b_chunks
            and a_vec.shape == b_vec.shape
            and bool(np.array_equal(a_vec, b_vec))
        )
    said = (ingest.stderr + verify.stderr).decode(errors="replace").strip().splitlines()
    return {
        "ingest_ok": ingest.returncode == 0,
        "verify_ok": verify.returncode == 0,
        "same": same,
        "said": said[-3:],
    }


def crash_kills(
    source: Path, kills: int, n_files: int, seed: int = 1, commands: list[str] | None = None
) -> list[dict]:
    """`kills` SIGKILLs shared out over `commands` (default: all of COMMANDS) in turn; one
    row per command, whose `problems` says what each kill that left something wrong left."""
    names = commands or list(COMMANDS)
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="mdvdb-kills-"))
    diff = versions(source, root, n_files, seed)
    references = [clean_build(root, diff, 0), clean_build(root, diff, 1)]
    first = mdvdb("ingest", "--root", str(root))
    subprocess.run(first, check=True, capture_output=True, env=quiet_env())
    version = 0
    lengths = {}
    for name in names:
        version = 1 - version
        lengths[name] = baseline(root, name, diff, version)
    rows = {
        name: dict.fromkeys(
            ("kills", "mid_run", "left_processes", "locked_folders", "failed_ingests"), 0
        )
        | {"unverifiable": 0, "differences": 0, "unkilled_s": round(lengths[name], 2)}
        | {"problems": []}
        for name in names
    }
    try:
        for n in range(kills):
            name = names[n % len(names)]
            row = rows[name]
            version = 1 - version
            switch(root, diff, version)
            delay = rng.uniform(0.05, lengths[name] * 1.1)
            killed = one_kill(root, name, delay, f"{os.getpid()}-k{n}")  # unique: runs side by side
            after = check_after(root, references[version])
            wrong = killed["left_names"] + [
                k for k in ("ingest_ok", "verify_ok", "same") if not after[k]
            ]
            wrong += [f"{killed['locks']} locks"] if killed["locks"] else []
            if wrong:
                said = after["said"]
                row["problems"].append(f"kill {n} at {delay:.2f} s: {wrong}, said {said}")
            row["kills"] += 1
            row["mid_run"] += killed["mid_run"]
            row["left_processes"] += killed["left"]
            row["locked_folders"] += bool(killed["locks"]) or not after["ingest_ok"]
            row["failed_ingests"] += not after["ingest_ok"]
            row["unverifiable"] += not after["verify_ok"]
            row["differences"] += not after["same"]
    finally:
        for folder in (root, *references):
            shutil.rmtree(folder, ignore_errors=True)
    return [{"command": name, **row} for name, row in rows.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--corpus", default="tldr")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--command", action="append", choices=list(COMMANDS), help="only these (repeatable)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from bench.common import corpus, print_table

    load = os.getloadavg()[0]
    pages = corpus(args.corpus) / "pages"
    rows = crash_kills(pages, args.kills, args.files, args.seed, args.command)
    title = f"SIGKILLed commands ({args.files} files, load {load:.1f} at the start)"
    problems = [f"{row['command']}: {line}" for row in rows for line in row.pop("problems")]
    print_table(title, rows, args.json)
    for line in problems if not args.json else ():
        print(line)


if __name__ == "__main__":
    main()
