"""A sweep on a Ray cluster: the same results as the local runner, and nothing lost with a node.

One local cluster serves the module: a head that runs no task and two nodes of one CPU
each, so that either node can be killed while the other finishes the sweep.
"""

import os
import sqlite3
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="needs Ray: pip install -e '.[ray]'")

from ray.cluster_utils import Cluster  # noqa: E402

from mutants import cli  # noqa: E402
from mutants.mutant import Mutant  # noqa: E402
from mutants.ray_runner import ClusterError, RayRunner, join_cluster  # noqa: E402
from mutants.runner import Runner, _descendants  # noqa: E402
from mutants.sets import select_mutants  # noqa: E402
from mutants.store import Scope, Store  # noqa: E402
from kernel.python_path import project_first  # noqa: E402
from suites.cases import smoke  # noqa: E402
from test_runner import SWEPT_BUGS, _launcher_prefixed, _mutant, spread  # noqa: E402

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="runs the mutation engine on the CPU interpreter"
)

NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
# killed and surviving on the smoke suite; the node-kill sweep runs these
KILL_SWEEP = ("causal-off-by-one", "dropped-kv-scale", "wrong-preshuffle-group-stride", "batch-blind-output-row")


@pytest.fixture(scope="module")
def cluster():
    """The head, without CPUs, and two nodes; their workers import this checkout, as nodes
    with the project installed do."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = project_first()
    local = Cluster(initialize_head=True, head_node_args={**NODE, "num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            local.add_node(**NODE)
        local.wait_for_nodes()
        ray.init(address=local.address)
        yield local
    finally:
        ray.shutdown()
        local.shutdown()
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


def _await_two_nodes(timeout: float = 120.0) -> None:
    """Until the cluster counts the CPUs of its two live nodes, no more: a node killed a
    moment ago may still be counted beside the one added in its place."""
    deadline = time.monotonic() + timeout
    while ray.cluster_resources().get("CPU", 0) != 2 * NODE["num_cpus"]:
        assert time.monotonic() < deadline, f"the cluster counts {ray.cluster_resources().get('CPU')} CPUs, not 2"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def catalog():
    """Bugs spread over the catalog, and those the node-kill test sweeps."""
    mutants = select_mutants("catalog")
    sample = spread(mutants, SWEPT_BUGS)
    return sample + [m for m in mutants if m.id in KILL_SWEEP and m not in sample]


def _sweep(engine, tmp_path, mutants, *, jobs=2, progress=None) -> dict:
    """Run ``mutants`` against smoke (every case: the kill matrix) and return what the store holds."""
    store = Store(tmp_path / f"{engine.__name__}.sqlite")
    scope = Scope("smoke", cli.scope_digest("cpu"), "matrix", "cpu")
    runner = engine(cases=smoke(), device="cpu", jobs=jobs, store=store, scope=scope, progress=progress)
    try:
        runner.baseline()
        runner.run(mutants, matrix=True)
    finally:
        runner.close()
    results = store.results(scope, {m.key: m.id for m in mutants})
    return {r.mutant_id: (r.outcome, r.killed_by, _first_problem_case(r.detail), r.case_results)
            for r in results.values()}


def _first_problem_case(detail: str) -> str:
    """The case a result's detail names. What it says of that case can differ between any two
    runs, local ones too: a mutant that reads memory nobody wrote gets other wrong values, and
    an out-of-bounds access lands as far from the arguments as the allocator placed them."""
    return detail.split(":", 1)[0]


@pytest.fixture(scope="module")
def local_results(tmp_path_factory, catalog):
    return _sweep(Runner, tmp_path_factory.mktemp("local"), catalog)


def test_bugs_across_the_catalog_on_smoke_through_ray_equal_the_local_runner(cluster, tmp_path, catalog, local_results):
    assert join_cluster(cluster.address, None).slots == 2
    through_ray = _sweep(RayRunner, tmp_path, catalog)
    assert len(local_results) == len(catalog)
    assert {outcome for outcome, *_ in local_results.values()} == {"killed", "survived"}
    assert {m.side for m in catalog} == {"device", "host"}
    assert through_ray == local_results


def _stalls_on_its_first_node(mark) -> Mutant:
    """The original kernel, except that the first time it runs it writes its pid to ``mark``
    and waits until its parent, the task's supervisor, is gone."""
    return _mutant("stalls-on-its-first-node", _launcher_prefixed(
        f"import os, pathlib, time; mark = pathlib.Path({str(mark)!r}); parent = os.getppid()\n"
        "    if not mark.exists():\n"
        "        mark.write_text(str(os.getpid()))\n"
        "        while os.getppid() == parent: time.sleep(0.1)"))


def test_a_node_killed_mid_sweep_loses_nothing(cluster, tmp_path, catalog, local_results):
    mark = tmp_path / "stalled-pid"
    stalled = _stalls_on_its_first_node(mark)
    mutants = [m for m in catalog if m.id in KILL_SWEEP]
    mutants.insert(1, stalled)
    killed, swept = [], threading.Event()

    def kill_the_stalled_node():
        while not mark.exists() or not mark.read_text():
            if swept.wait(0.05):
                return
        pid = int(mark.read_text())
        node = next(n for n in cluster.worker_nodes if pid in _descendants(n.all_processes["raylet"][0].process.pid))
        cluster.remove_node(node, allow_graceful=False)
        killed.append(time.monotonic())

    killer = threading.Thread(target=kill_the_stalled_node)
    killer.start()
    started = time.monotonic()
    try:
        results = _sweep(RayRunner, tmp_path, mutants)
    finally:
        swept.set()
        killer.join()
        if killed:
            cluster.add_node(**NODE)  # the module's cluster keeps two nodes
            _await_two_nodes()
    assert killed, "the stalled mutant's node was never killed"
    print(f"node killed {killed[0] - started:.1f} s into the sweep, which took {time.monotonic() - started:.1f} s")
    assert results.pop(stalled.id) == ("survived", [], "", {case.id: "pass" for case in smoke()})
    assert results == {m.id: local_results[m.id] for m in mutants if m is not stalled}


def test_a_node_with_another_project_is_refused(cluster, tmp_path):
    store = Store(tmp_path / "results.sqlite")
    scope = Scope("smoke", "another-checkout", "first-kill", "cpu")
    runner = RayRunner(cases=smoke()[:1], device="cpu", jobs=1, store=store, scope=scope)
    try:
        with pytest.raises(ClusterError, match=r"^node \w+: its project, torch or Triton differ from the sweep's"
                                               r" \(digest \w+, the sweep's another-checkout\)"):
            runner.baseline()
    finally:
        runner.close()


def test_kmut_run_on_a_ray_cluster_prints_the_report_and_keeps_the_connection(cluster, tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    command = ["run", "--ray", cluster.address, "--suite", "smoke", "--only", "causal-off-by-one,dropped-kv-scale",
               "--no-classify", "--store", str(store)]
    _await_two_nodes()
    assert cli.main(command) == cli.EXIT_OK
    printed = capsys.readouterr()
    assert "2 Ray task(s) at a time, one CPU each" in printed.err
    assert "outcomes: killed 2" in printed.out
    assert ray.is_initialized()  # the cluster the caller joined stays joined
    with sqlite3.connect(store) as db:
        first = db.execute("SELECT mutant_id, finished FROM results").fetchall()
    assert cli.main(command) == cli.EXIT_OK
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT mutant_id, finished FROM results").fetchall() == first, "a finished mutant ran again"
