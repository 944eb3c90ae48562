"""Where one `mdvdb ingest` spends its time, step by step, in one process (wall and CPU).

Runs the real command (`mdvdb.cli.main`) with timers put around the named steps as their
modules load, so nothing is imported earlier than the command itself imports it. A step's
figures include the steps it calls (`plan` includes `previous index open + check`); its CPU
is the calling thread's (pack's writer thread and the checksum thread run beside the steps:
their share is in "process CPU"). "start to first stage" is interpreter start-up, imports and
the lock before doit runs the first stage.

    python bench/edit_steps.py ROOT [--edit] [--rounds 3] [--json]

`--edit` appends a line to the first Markdown file (path order) before each round; without it
each round is a no-op. Rounds alternate nothing: use bench/incremental_ab.py for A/B.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# module -> [(attribute path, step label)]
STEPS: dict[str, list[tuple[str, str]]] = {
    "pipeline.tasks": [("_discover", "discover stage"), ("IngestRun.close", "run close")],
    "pipeline.walk.discover": [
        ("walk_folders", "walk"),
        ("_merged", "walk: merge of the forked half"),
        ("folder_signatures", "folder digests"),
        ("discover", "compare moved folders"),
    ],
    "pipeline.stages": [
        ("parse", "parse stage"),
        ("chunk", "chunk stage"),
        ("embed", "embed stage"),
        ("cluster", "cluster stage"),
        ("schema", "schema stage"),
        ("pack", "pack stage"),
        ("_prepare_files", "parse: parse + chunk + embed"),
        ("_drop_unparsed", "parse: drop unparsed"),
    ],
    "pipeline.workers": [("prepare_batch", "parse: one batch")],
    "kernel.providers.local": [("load_tokenizer", "parse: tokenizer load")],
    "pipeline.pack.build": [
        ("plan", "plan"),
        ("_previous", "previous index open + check"),
        ("build_tables", "build tables"),
    ],
    "pipeline.pack.schema": [("update", "schema update")],
    "pipeline.cluster.topics": [("assign", "cluster assign")],
    "pipeline.pack.lexical": [("update", "lexical update")],
    "pipeline.pack.duplicates": [("update", "near-duplicates")],
    "pipeline.pack.ivf": [("build", "IVF")],
    "kernel.index_format": [
        ("verify_checksums", "checksums of the previous index"),
        ("write_index", "write_index (older versions: all of the write)"),
        ("IndexWriter.finish", "write: finish (wait, tail, fsync, rename)"),
        ("IndexWriter._join", "write: wait for the writer thread"),
        ("_write_table", "write: tables (either thread)"),
        ("check_soon", "start of the checksum thread"),
    ],
    "pipeline.state": [
        ("State.hand_over", "hand over"),
        ("State.prune", "prune"),
        ("State.chunked", "state: chunked"),
        ("State.close", "state: close"),
        ("State.replace_manifest", "state: replace manifest"),
        ("State.manifest_in_folders", "state: manifest rows of moved folders"),
        ("Published._trusted", "state: wait for the checksum verdict"),
    ],
}

TIMES: dict[str, list[float]] = {}


def _timed(label: str, fn):
    # CPU of the calling thread only: pack's writer thread runs beside the steps.
    def wrapper(*args, **kwargs):
        w, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            got = TIMES.setdefault(label, [0.0, 0.0, 0])
            got[0] += time.perf_counter() - w
            got[1] += time.thread_time() - c
            got[2] += 1

    wrapper.__wrapped__ = fn
    return wrapper


def _patch(module) -> None:
    for attr, label in STEPS.get(module.__name__, []):
        owner, _, name = attr.rpartition(".")
        target = getattr(module, owner, None) if owner else module
        if target is not None and hasattr(target, name):  # another version may lack it
            setattr(target, name, _timed(label, getattr(target, name)))


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in STEPS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def child(root: str) -> None:
    """One ingest in this process; prints the step times as JSON on the last line."""
    started = float(os.environ["EDIT_STEPS_T0"])
    sys.meta_path.insert(0, _Finder())
    first: list[float] = []

    def mark_first():
        if not first:
            first.append(time.time())

    STEPS["pipeline.tasks"].append(("_action", "_first_action"))
    original = _timed

    def timed_action(label, fn):
        if label != "_first_action":
            return original(label, fn)

        def make(*args, **kwargs):
            action = fn(*args, **kwargs)

            def run():
                mark_first()
                return action()

            return run

        return make

    globals()["_timed"] = timed_action
    from mdvdb.cli import main

    sys.argv = ["mdvdb", "ingest", "--root", root]

    def report() -> None:
        out = {k: v for k, v in TIMES.items() if not k.startswith("_")}
        out["start to first stage"] = [(first[0] if first else time.time()) - started, 0, 1]
        usage = os.times()
        out["main thread CPU"] = [0, time.thread_time(), 1]
        out["process CPU (all threads)"] = [0, usage.user + usage.system, 1]
        out["of which system"] = [0, usage.system, 1]
        print("\n" + json.dumps(out), flush=True)

    # `mdvdb ingest` may end with `os._exit` (no teardown, no `finally` after it): the
    # figures are printed on the way out either way.
    real_exit = os._exit

    def exit_now(code: int) -> None:
        report()
        real_exit(code)

    os._exit = exit_now
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        report()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--edit", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = args.root.resolve()
    # Here, in the parent only: the child imports the measured install, not this checkout.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.incremental_ab import pick_file

    target = pick_file(root) if args.edit else None
    samples: dict[str, list[tuple[float, float]]] = {}
    totals = []
    loads = []
    for step in range(args.rounds):
        if target is not None:
            with open(target, "a") as fh:
                fh.write(f"\nEdited by edit_steps {step} {time.time()}.\n")
        loads.append(os.getloadavg()[0])
        env = {**os.environ, "EDIT_STEPS_T0": repr(time.time())}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [args.python, __file__, "--child", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
        )
        out, err = proc.communicate()
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"ingest failed: {err.decode()[-2000:]}")
        figures = json.loads(out.decode().strip().splitlines()[-1])
        totals.append(wall)
        for label, (w, c, _n) in figures.items():
            samples.setdefault(label, []).append((w, c))
    order = ["start to first stage"] + [label for steps in STEPS.values() for _, label in steps]
    order += ["main thread CPU", "process CPU (all threads)", "of which system"]
    rows = []
    for label in order:
        got = samples.get(label)
        if not got:
            continue
        rows.append(
            {
                "step": label,
                "wall s": round(statistics.median(w for w, _ in got), 3),
                "CPU s": round(statistics.median(c for _, c in got), 3),
            }
        )
    rows.append({"step": "process (wall, whole)", "wall s": round(statistics.median(totals), 3)})
    title = (
        f"{'one-file edit' if args.edit else 'no-op'} on {root.name}, median of {args.rounds}, "
        f"load {statistics.median(loads):.1f}"
    )
    if args.json:
        print(json.dumps({"title": title, "rows": rows}))
        return
    print(title)
    for row in rows:
        cpu = row.get("CPU s")
        print(f"  {row['step']:<36} {row['wall s']:>7.3f}  {'' if cpu is None else f'{cpu:7.3f}'}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        # Not this folder (bench/query.py would shadow the `query` package) nor this checkout:
        # the interpreter's own install is measured.
        sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
        child(sys.argv[2])
    else:
        main()
