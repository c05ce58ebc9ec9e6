"""Running a sweep on a Ray cluster: one Ray task per mutant, on one GPU (CUDA) or one CPU
(the interpreter) of whichever node Ray picks.

The driver keeps what the local runner keeps: the sanity gates, the verdicts, the kill
history and the store, into which each result is written as its task returns. What a task
needs travels with it, as data: the suite's cases, the baseline's case times (the
timeouts), and the mutated file; no shared filesystem is assumed. Every node runs the
project installed from the same checkout as the driver, and each task checks that: a node
whose kernel, oracle, suites, kmut, torch or Triton differ from the sweep's is an error,
never a result.

On its node a task runs the local runner's scheduler over one worker process, so a hang,
a crash, a device fault and a worker lost to the OOM killer are decided exactly as on one
machine. Losing the task itself (its node, or the Ray worker that supervises it) says
nothing about the mutant: Ray runs it again elsewhere.
"""

import logging
import os
from dataclasses import dataclass, replace

import ray
from ray.exceptions import RayError, RayTaskError

from mutants.runner import KillHistory, Runner, _Progress, _Scheduler, _Task, _Worker
from mutants.target import Target
from mutants.worker import WorkerStartError
from suites.runnable import from_dict

NODE_RETRIES = 3  # times Ray runs a task again after losing its node or worker
TASK_RESOURCES = {"cpu": {"num_cpus": 1}, "cuda": {"num_cpus": 1, "num_gpus": 1}}
SLOT_RESOURCE = {"cpu": "CPU", "cuda": "GPU"}


class ClusterError(WorkerStartError):
    """The cluster cannot run the sweep: unreachable, without the resources, a node with
    another version of the project, or a task lost on every try."""


@dataclass(frozen=True)
class ClusterSweep:
    """What joining a cluster found: where cases run, the digest of every node's project and
    versions, and how many tasks run side by side."""

    device: str
    digest: str
    slots: int
    joined: bool  # this call connected the process: leaving disconnects it


@dataclass(frozen=True)
class Shipment:
    """What every task of one batch shares, put into the object store once."""

    case_dicts: list[dict]
    case_seconds: dict[str, float]
    case_peaks: dict[str, int]
    timeout_floor: float
    device: str
    target: Target
    digest: str


def join_cluster(address: str | None, device: str | None) -> ClusterSweep:
    """Connect to the cluster at ``address`` (none: the one ``RAY_ADDRESS`` names, else a new
    one on this machine), unless connected already, and find the sweep's device (default:
    cuda when the cluster has GPUs), slots and digest."""
    where = address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
    joined = not ray.is_initialized()
    if joined:
        try:
            ray.init(address=address or None, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise ClusterError(f"cannot join the Ray cluster at {where}: {_first_line(error)}") from None
    resources = ray.cluster_resources()
    device = device or ("cuda" if resources.get("GPU") else "cpu")
    slots = int(resources.get(SLOT_RESOURCE[device], 0))
    if not slots:
        raise ClusterError(f"the Ray cluster at {where} has no {SLOT_RESOURCE[device]} for --device {device}")
    digest = ray.get(_probe_digest.options(**TASK_RESOURCES[device]).remote(device))
    return ClusterSweep(device, digest, slots, joined)


def leave_cluster(sweep: ClusterSweep) -> None:
    if sweep.joined:
        ray.shutdown()


class RayRunner(Runner):
    """The runner whose batches (baseline, re-runs, mutants) run as Ray tasks, at most
    ``jobs`` at a time, each mutant's cases in the order of a local run."""

    def _run_tasks(self, tasks: list[_Task], *, label: str, on_done=None, mutants=None,
                   per_case: bool = False, history: KillHistory | None = None, on_share=None) -> list[_Progress]:
        # a Ray task runs a whole mutant and answers once: nothing is answered before it ends
        # (``on_share`` has nothing to keep), and a task resumed from the store starts over
        shipment = ray.put(Shipment(self.case_dicts, dict(self.case_seconds), dict(self.case_peaks),
                                    self.timeout_floor, self.device, self.target, self.scope.digest))
        run_task = _run_on_node.options(**TASK_RESOURCES[self.device], max_retries=NODE_RETRIES,
                                        retry_exceptions=False)
        queue = [_Progress(task) for task in tasks]
        total = sum(len(task.cases) for task in tasks if task.counted) if per_case else len(tasks)
        running: dict = {}  # object ref -> the progress record of the task it runs
        kills = history or KillHistory()
        finished: list[_Progress] = []
        self._report(label, 0, total)
        try:
            while queue or running:
                while queue and len(running) < self.jobs:
                    progress = queue.pop(0)
                    mutant = mutants.get(progress.task.mutant_id) if mutants else None
                    self.put_in_order(kills, progress, mutant)
                    mutated = {mutant.path: mutant.source} if mutant else {}
                    running[run_task.remote(shipment, replace(progress.task, overlay=""), mutated)] = progress
                (ready,), _ = ray.wait(list(running), num_returns=1)
                task = running.pop(ready).task
                done = _returned(ready, task)
                finished.append(done)
                if on_done:
                    on_done(done)
                self._report(label, sum(len(p.results) for p in finished if p.task.counted) if per_case
                             else len(finished), total)
        finally:
            for ref in running:
                ray.cancel(ref, force=True)
        return finished


def _returned(ref, task: _Task) -> _Progress:
    """The progress record a task returned; a node that refused the task, or a task lost on
    every try, stops the sweep (what finished is in the store)."""
    try:
        return ray.get(ref)
    except RayTaskError as error:
        raise ClusterError(_first_line(error.cause)) from None
    except RayError as error:
        raise ClusterError(f"{task.mutant_id}: its node or Ray worker was lost {NODE_RETRIES + 1} times"
                           f" ({_first_line(error)}); finished mutants are in the store and the next run"
                           f" resumes") from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


# -- on the node --

_digests: dict[str, str] = {}
_idle_worker: tuple[tuple, _Worker] | None = None  # kept between the tasks of one Ray worker process


def _node_digest(device: str) -> str:
    if device not in _digests:
        from mutants.cli import scope_digest

        _digests[device] = scope_digest(device)
    return _digests[device]


@ray.remote
def _probe_digest(device: str) -> str:
    return _node_digest(device)


@ray.remote
def _run_on_node(shipment: Shipment, task: _Task, mutated: dict[str, str]) -> _Progress:
    """Run one task on this node: its overlay built here from the mutated file, its cases in
    a worker process, decided by the local scheduler."""
    digest = _node_digest(shipment.device)
    if digest != shipment.digest:
        node = ray.get_runtime_context().get_node_id()
        raise ClusterError(f"node {node}: its project, torch or Triton differ from the sweep's (digest {digest},"
                           f" the sweep's {shipment.digest}); install the driver's checkout on every node")
    runner = _NodeRunner(shipment)
    try:
        path, source = next(iter(mutated.items()), (None, None))  # none: the original
        task.overlay = runner.overlay("mutant" if path else "original", path, source)
        (progress,) = _Scheduler(runner, [task], label="").run()
        return progress
    finally:
        runner.close()


class _NodeRunner(Runner):
    """The local runner on a node, for one task: one worker, reused by the next task of this
    Ray worker process while it is healthy and its device is the same."""

    def __init__(self, shipment: Shipment):
        super().__init__(cases=[from_dict(fields) for fields in shipment.case_dicts], device=shipment.device,
                         jobs=1, store=None, scope=None, timeout_floor=shipment.timeout_floor,
                         target=shipment.target)
        self.case_seconds, self.case_peaks = shipment.case_seconds, shipment.case_peaks
        # Ray names the task's GPU in CUDA_VISIBLE_DEVICES; a worker started for another keeps its own
        self.worker_key = (self.device, self.target.op, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.devices, self.jobs = [self.device], 1  # the task's GPU is the only one visible

    def _start_worker(self, taken: list[str]) -> _Worker:
        global _idle_worker
        idle, _idle_worker = _idle_worker, None
        if idle and idle[0] == self.worker_key and idle[1].process.is_alive():
            return idle[1]
        if idle:
            idle[1].kill()
        return super()._start_worker(taken)

    def _release_worker(self, worker: _Worker, completed: bool) -> None:
        global _idle_worker
        if completed and worker.ready and worker.process.is_alive():
            _idle_worker = (self.worker_key, worker)
        else:
            super()._release_worker(worker, completed)
