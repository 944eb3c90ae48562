"""A sharded index on Ray Serve (issue 36; query/shards/serve.py, mdvdb/serve_ray.py): a real
`mdvdb serve --ray ADDRESS` on a cluster of a head and two worker nodes of two CPUs each
(`ray.cluster_utils.Cluster`, each node its own raylet), two shard groups of two replicas.
Its HTTP endpoint and a reader with MDVDB_RAY_SERVE answer exactly as the one-file index;
the replicas are spread over both nodes; every round of a query meets the replica that holds
its arrays; a replica SIGKILLed during queries leaves every answer exact; SIGTERM stops it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import build_index, run_cli
from tests.test_shards import QUERIES, SHARDED, _project

SERVE = importlib.util.find_spec("ray") is not None and importlib.util.find_spec("starlette")


def _search(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("search", *args, "--root", str(root), "--json", env=env)


# -- without a cluster: what is refused before Ray starts ----------------------------------
def test_serve_ray_refuses_a_one_file_index_and_a_bad_listen(tmp_path: Path) -> None:
    """`--ray` serves shard files: a one-file index is one line, exit 1; a bad --listen is a
    usage error, exit 2; neither starts Ray."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.md").write_text("# a\n\ntext\n", encoding="utf-8")
    assert run_cli("ingest", "--root", str(root)).returncode == 0
    done = run_cli("serve", "--ray", "local", "--root", str(root))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "no sharded index" in done.stderr
    sharded = tmp_path / "s"
    shutil.copytree(root, sharded)
    assert run_cli("ingest", "--root", str(sharded), env=SHARDED).returncode == 0
    done = run_cli("serve", "--ray", "local", "--listen", "nope", "--root", str(sharded))
    assert done.returncode == 2 and "--listen: expected HOST:PORT" in done.stderr


def test_the_endpoint_checks_its_arguments() -> None:
    """The HTTP body is the MCP search tool's arguments: an unknown one, a wrong type, a
    value out of bounds or an empty request is refused with a one-line reason."""
    from mdvdb.serve_ray import RequestProblem, request_fields

    assert request_fields({"query": "tar", "limit": 3})["limit"] == 3
    assert request_fields({"query": "tar", "filters": ["category=a"]})["filters"] == ["category=a"]
    for body, reason in [
        ({"query": "tar", "nope": 1}, "unknown argument(s): nope"),
        ({"query": 5}, "query: expected str"),
        ({"query": "tar", "limit": "3"}, "limit: expected int"),
        ({"query": "tar", "limit": 0}, "limit must be at least 1"),
        ({"query": "tar", "filters": "category=a"}, "filters: expected a list of strings"),
        ({"query": "tar", "mode": "fast"}, "mode: expected one of"),
        ({}, "give a query"),
        (["tar"], "expected a JSON object"),
    ]:
        with pytest.raises(RequestProblem, match=reason.replace("(", r"\(").replace(")", r"\)")):
            request_fields(body)


# -- on a cluster of three nodes -------------------------------------------------------------
needs_serve = pytest.mark.skipif(not SERVE, reason="ray[serve] is not installed")

QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",  # as the cluster (tests/test_ray_nodes.py)
    "MDVDB_CLUSTERING_ENABLED": "false",
}


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("serve")
    one = _project(base / "one")
    four = base / "four"
    shutil.copytree(one, four)
    build_index(one, env=QUIET)
    build_index(four, env={**QUIET, **SHARDED})
    return one, four


@pytest.fixture(scope="module")
def cluster():
    from tests.test_ray_nodes import cluster_of

    with cluster_of(cpus=2) as running:
        yield running


class Served:
    def __init__(self, proc: subprocess.Popen, address: str, url: str, token: str):
        self.proc, self.address, self.url = proc, address, url
        self.headers = {"authorization": f"Bearer {token}"}

    def env(self, **more: str) -> dict[str, str]:
        return {**QUIET, **SHARDED, "MDVDB_RAY_SERVE": self.address, **more}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def served(cluster, twins):
    """`mdvdb serve --ray ADDRESS` of the four shards: two groups of two replicas."""
    _, four = twins
    argv = [sys.executable, "-m", "mdvdb", "serve", "--ray", cluster.address, "--root", str(four)]
    argv += ["--groups", "2", "--replicas", "2", "--cpus", "1"]
    argv += ["--listen", f"127.0.0.1:{_free_port()}"]
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **QUIET, **SHARDED},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300  # a loaded 2-core machine: Serve up in ~20-60 s
    while not any("search at" in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"mdvdb serve --ray did not start: {lines}")
        time.sleep(0.2)
    ready = next(line for line in lines if "search at" in line)
    # "serve: 2 shard group(s) x 2 replica(s) of ROOT on Ray ADDRESS; search at URL
    # (bearer token: PATH)", the token generated in the state folder
    assert ready.startswith("serve: 2 shard group(s) x 2 replica(s) of "), ready
    url, token_file = ready.split(" search at ")[1].split(" (bearer token: ")
    token = Path(token_file.strip().rstrip(")")).read_text(encoding="utf-8").strip()
    assert token_file.startswith(str(four / ".markdownvdb.state")), token_file
    running = Served(proc, cluster.address, url, token)
    yield running
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


DRIVER = """
import json, sys
import ray
from ray import serve
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
out = {}
for group in ("shards-0", "shards-1"):
    handle = serve.get_deployment_handle(group, app_name="mdvdb")
    seen = {}
    for _ in range(int(sys.argv[2])):
        hello = handle.hello.remote().result(timeout_s=60)
        seen[hello["pid"]] = hello
    out[group] = list(seen.values())
print(json.dumps(out))
"""


def _replicas(served: Served, asks: int = 40) -> dict[str, list[dict]]:
    """Each group's replicas as they answer `hello` (pid, node, requests, replays), from a
    driver of its own (this process stays out of Ray)."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, served.address, str(asks)],
        env={**os.environ, **QUIET},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@needs_serve
@pytest.mark.slow
def test_the_endpoint_answers_as_mdvdb_search_json(served: Served, twins) -> None:
    """POST the search tool's arguments with the bearer token: the body is what `mdvdb
    search --json` prints for the one-file index, byte for byte, in every mode, with a filter
    and by file; without the token, 401."""
    import httpx

    one, _ = twins
    asked = [
        ({"query": q, "mode": m}, ["--mode", m]) for q in QUERIES for m in ("lexical", "hybrid")
    ]
    asked += [
        ({"query": QUERIES[0], "mode": "semantic"}, ["--mode", "semantic"]),
        (
            {"query": "example work", "filters": ["category=network"]},
            ["--filter", "category=network"],
        ),
        ({"query": "secure shell", "files_only": True}, ["--files"]),
        ({"query": "qqqzzzxxy"}, []),
    ]
    for body, flags in asked:
        words = [body["query"], *flags]
        expected = _search(one, *words)
        assert expected.returncode == 0, expected.stderr
        answer = httpx.post(
            served.url, json={**body, "limit": 10}, headers=served.headers, timeout=120
        )
        assert answer.status_code == 200, answer.text
        assert answer.text == expected.stdout, body
    refused = httpx.post(
        served.url, json={"query": "tar", "nope": 1}, headers=served.headers, timeout=60
    )
    assert refused.status_code == 400 and "unknown argument(s): nope" in refused.text
    assert httpx.get(served.url, headers=served.headers, timeout=60).status_code == 405
    # any local user can reach a loopback port: without the bearer token, 401 and nothing
    for headers in ({}, {"authorization": "Bearer wrong-token-of-32-characters-xx"}):
        stranger = httpx.post(served.url, json={"query": "tar"}, headers=headers, timeout=60)
        assert stranger.status_code == 401 and "results" not in stranger.text
        assert stranger.headers["www-authenticate"].startswith("Bearer")


@needs_serve
@pytest.mark.slow
def test_a_reader_sends_its_shard_work_to_the_groups(served: Served, twins) -> None:
    """`mdvdb search` with MDVDB_RAY_SERVE: the one-file JSON, its per-shard work done by
    the groups' replicas, which are spread over both worker nodes; every round of a query
    met the replica holding its arrays (none was replayed)."""
    one, four = twins
    before = _replicas(served)
    for mode in ("lexical", "hybrid", "semantic"):
        for query in QUERIES:
            expected = _search(one, query, "--mode", mode)
            routed = _search(four, query, "--mode", mode, env=served.env())
            assert routed.returncode == 0, routed.stderr
            assert routed.stdout == expected.stdout, (mode, query)
    after = _replicas(served)
    for group in ("shards-0", "shards-1"):
        assert len(after[group]) == 2, after[group]  # both replicas answered hello
        done = sum(r["requests"] for r in after[group]) - sum(r["requests"] for r in before[group])
        assert done >= 3 * len(QUERIES), (group, done)
        assert sum(r["replays"] for r in after[group]) == 0, after[group]
    nodes = {r["node"] for replicas in after.values() for r in replicas}
    assert len(nodes) == 2, nodes  # the head offers no CPU: both worker nodes hold replicas


@needs_serve
@pytest.mark.slow
def test_a_missing_app_is_one_line(served: Served, twins) -> None:
    _, four = twins
    done = _search(four, "tar", env=served.env(MDVDB_RAY_SERVE_APP="elsewhere"))
    assert done.returncode == 1, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("mdvdb:")]
    assert len(lines) == 1 and "Serve app 'elsewhere'" in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


KILLED = """
import json, os, sys
from kernel.config import load_config
from query import open_index
index = open_index(config=load_config(sys.argv[1], dict(os.environ)))
for i in range(int(sys.argv[2])):
    for mode in ("hybrid", "lexical"):
        query = sys.argv[3 + i % (len(sys.argv) - 3)]
        hits = [[h.path, h.start_line, h.score] for h in index.search(query, mode=mode).results]
        print(json.dumps([mode, query, hits]), flush=True)
"""


@needs_serve
@pytest.mark.slow
def test_a_replica_killed_during_queries_leaves_answers_exact(served: Served, twins) -> None:
    """A library reader asks query after query; one replica of each group is SIGKILLed
    while it does. Every answer is still the one-file answer (a call whose replica died is
    sent again, and a replica that never saw the query rebuilds it from the replayed
    rounds); Serve starts replacements."""
    from kernel.config import load_config
    from query import open_index

    one, four = twins
    reference = open_index(config=load_config(one, {**os.environ, **QUIET}))
    want = {
        (mode, q): [[h.path, h.start_line, h.score] for h in reference.search(q, mode=mode).results]
        for q in QUERIES
        for mode in ("hybrid", "lexical")
    }
    victims = [group[0]["pid"] for group in _replicas(served).values()]
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(four), "40", *QUERIES],
        env={**os.environ, **served.env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    got = [json.loads(proc.stdout.readline())]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    got += [json.loads(line) for line in proc.stdout]
    assert proc.wait(timeout=600) == 0, proc.stderr.read()[-3000:]
    assert len(got) == 80
    for mode, query, hits in got:
        assert hits == want[(mode, query)], (mode, query)
    deadline = time.monotonic() + 240
    while True:  # replacements: two live replicas a group again, the killed ones gone
        now = _replicas(served)
        pids = {r["pid"] for replicas in now.values() for r in replicas}
        if not pids & set(victims) and all(len(r) == 2 for r in now.values()):
            break
        assert time.monotonic() < deadline, now
        time.sleep(2)


@needs_serve
@pytest.mark.slow
def test_sigterm_stops_the_app(served: Served, twins) -> None:
    """SIGTERM: the app is deleted and the process exits 0; a reader then says in one line
    that the app is not there. (Last in this file: it ends the module's server.)"""
    _, four = twins
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=180) == 0
    done = _search(four, "tar", env=served.env())
    assert done.returncode == 1 and "Serve app 'mdvdb'" in done.stderr, done.stderr[-2000:]


@needs_serve
@pytest.mark.slow
def test_serve_run_deploys_the_builder(served: Served, twins) -> None:
    """The documented config path: `serve run --name APP mdvdb.serve_ray:build root=...
    token_file=...` on the same cluster (after `mdvdb serve --ray` stopped: Serve and its HTTP
    proxy stay) serves the same answers at /APP, its ingress finding the groups of its own
    application and asking the token of that file."""
    import httpx

    one, four = twins
    assert served.proc.poll() is not None  # the SIGTERM test above ran
    serve_cli = Path(sys.executable).parent / "serve"
    argv = [str(serve_cli), "run", "--non-blocking", "--address", served.address]
    argv += ["--name", "built", "--route-prefix", "/built", "mdvdb.serve_ray:build"]
    token = four / ".markdownvdb.state" / "serve-http.token"
    argv += [f"root={four}", "groups=1", "cpus=0.1", f"token_file={token}"]
    done = subprocess.run(
        argv, env={**os.environ, **QUIET, **SHARDED}, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    url = served.url.rsplit("/", 1)[0] + "/built"
    expected = _search(one, QUERIES[0], "--mode", "hybrid")
    asked = {"query": QUERIES[0], "mode": "hybrid"}
    assert httpx.post(url, json=asked, timeout=180).status_code == 401
    answer = httpx.post(url, json=asked, headers=served.headers, timeout=180)
    assert answer.status_code == 200, answer.text
    assert answer.text == expected.stdout
    routed = _search(
        four, QUERIES[0], "--mode", "hybrid", env=served.env(MDVDB_RAY_SERVE_APP="built")
    )
    assert routed.stdout == expected.stdout, routed.stderr[-2000:]


def test_a_group_answers_only_its_own_shard_files(twins) -> None:
    """A shard group's calls for another group's file, a path, an unknown call: an error
    answer each (the router pins files by name: nothing else is opened)."""
    from kernel import shards
    from kernel.config import load_config
    from query.shards.serve import ShardGroup

    _, four = twins
    config = load_config(four, {**os.environ, **SHARDED})
    manifest = shards.read_manifest(config.shards_path)
    group = ShardGroup(str(config.shards_path), [0, 2], 4, 2)
    mine, other = manifest.entries[0].name, manifest.entries[1].name
    answers = group.calls(
        "",
        [
            {"file": mine, "call": "info", "args": []},
            {"file": other, "call": "info", "args": []},
            {"file": "../" + mine, "call": "info", "args": []},
            {"file": mine, "call": "__init__", "args": []},
        ],
    )
    assert "value" in answers[0], answers[0]
    assert all("error" in a for a in answers[1:]), answers


def test_a_group_of_another_release_is_one_line() -> None:
    """A group whose hello lacks this release's protocol (an older mdvdb's) or serves
    another index: one line naming it."""
    from kernel import index_format
    from query.shards.serve import PROTOCOL, _check

    manifest = type("M", (), {"shards": 4})()
    with pytest.raises(index_format.IndexFormatError, match="speaks protocol None"):
        _check({"shards": [0]}, "shards-0", manifest)
    with pytest.raises(index_format.IndexFormatError, match="index of 3 shards"):
        _check({"protocol": PROTOCOL, "shard_count": 3}, "shards-0", manifest)
