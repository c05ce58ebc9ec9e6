"""kmut: does the suite catch the bugs that matter?

    kmut list [--mutants SET] [--only ID,...]
    kmut show ID [--mutants SET]
    kmut run [--suite curated|exhaustive] [--mutants SET] [--only ID,...] [--matrix] [--jobs N]
             [--device cpu|cuda] [--fail-under PCT] [--json FILE] [--html FILE]
             [--ray [ADDRESS]] [--shard K/N]
    kmut report [same selection as run] [--fail-under PCT] [--json FILE] [--html FILE]
    kmut merge STORE... [--store FILE] [--fail-under PCT] [--json FILE] [--html FILE]
    kmut minimize [--suite ...] [--mutants SET] [--device ...]
    kmut curate [--suite ...] [--mutants SET] [--only ID,...] [--budget SECONDS] [--write]

SET is catalog (the named bugs, default), generic, gpu, operators (every operator, on the
kernel and on its host code: launcher, tuning, validation), device or host (every operator, on
that side's code only) or all.
Results live in a store: a run resumes where an earlier one stopped and never re-runs a
finished mutant of an unchanged kernel and suite. The store is .mutants/results.sqlite in the
current folder when that can be written, else $XDG_CACHE_HOME/kmut/results.sqlite (or
~/.cache/kmut/); classification's compile cache lives beside it, in compile-cache/.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from mutants.compiled import DEFAULT_SPACE_BUDGET, OriginalDoesNotCompile
from mutants.sets import MUTANT_SETS
from mutants.shards import MergeError, parse_shard, sharded_selection
from mutants.walk import DEVICE, HOST
from mutants.store import compile_cache_beside, default_store_path
from mutants.target import TARGETS

PROCESS_STARTED = time.monotonic()

SUITE_NAMES = ("curated", "exhaustive", "sample", "smoke")

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_USAGE, EXIT_BASELINE, EXIT_CANNOT_RUN = 0, 1, 2, 3, 4
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE, EXIT_TERMINATED = 130, 141, 143  # 128 + SIGINT, SIGPIPE, SIGTERM
EXIT_CODES = """exit codes:
  0    passed (the score meets --fail-under, when given)
  1    the score is below --fail-under, or mutants of the selection have no result
  2    usage error
  3    the unmutated baseline failed or is flaky
  4    could not run: a file could not be read or written, the store is not usable, workers cannot start
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): finished mutants are kept for the next run
"""


class UsageError(Exception):
    """A one-line error for the user; never a traceback."""


class CannotRun(Exception):
    """A file that cannot be written, found before any work starts: a one-line error."""


class Terminated(KeyboardInterrupt):
    """SIGTERM: ends a run the way Ctrl-C does."""


def _number(parse, accepts, expected: str):
    """An argparse type: ``parse`` the text, then require ``accepts`` of the value."""

    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    return convert


DEFAULT_CURATE_BUDGET = 120.0

percentage = _number(float, lambda value: 0 <= value <= 100, "a percentage from 0 to 100")
_seconds = _number(float, lambda value: value >= 0, "seconds, 0 or more")
_positive = _number(int, lambda value: value >= 1, "a positive integer")
_shard = _number(parse_shard, lambda shard: True, "K/N with 1 <= K <= N")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kmut", description="Mutation testing for the fp8 paged MQA logits kernel.",
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.set_defaults(only=None, shard=None)

    def selection(p, *, with_suite=True, with_only=True):
        p.add_argument("--target", dest="target", choices=TARGETS, default="triton",
                       help="the code under mutation: the Triton op (default) or the FlyDSL gfx950 kernel")
        p.add_argument("--mutants", dest="mutant_set", choices=MUTANT_SETS, default="catalog",
                       help="which mutants: the bug catalog (default); generic, gpu or operators (every"
                            " operator, kernel and host code); device or host (every operator, on that"
                            " side's code only); all")
        if with_only:
            p.add_argument("--only", dest="only", default=None, metavar="ID,...",
                           help="only these mutants of the set (comma-separated ids, as `kmut list` prints them)")
        if with_suite:
            p.add_argument("--suite", dest="suite", choices=SUITE_NAMES, default="curated",
                           help="curated (default), exhaustive (the nightly sweep), sample (curated and a fixed"
                                " sample of exhaustive) or smoke (three quick cases)")
            p.add_argument("--device", dest="device", choices=("cpu", "cuda"), default=None,
                           help="where cases run (default: cuda when available, else cpu)")
            p.add_argument("--matrix", dest="matrix", action="store_true",
                           help="run every case against every mutant (the full kill matrix)")
            p.add_argument("--emulate", dest="emulate", action=argparse.BooleanOptionalAction, default=True,
                           help="on the CPU, run the cases of a target no device here runs (the gfx950 kernel) on"
                                " its emulator (default); --no-emulate: its mutants are only compiled and"
                                " classified, their results kept apart from the emulated run's")
            store(p, "the result store")

    def store(p, what: str):
        p.add_argument("--store", dest="store", type=Path, default=default_store_path(), metavar="FILE",
                       help=f"{what} (default: %(default)s; .mutants/ in the current folder when it can be"
                            " written, else the user's cache folder, $XDG_CACHE_HOME/kmut or ~/.cache/kmut);"
                            " the compile cache lives beside it, in compile-cache/")

    def shard(p):
        p.add_argument("--shard", dest="shard", type=_shard, default=None, metavar="K/N",
                       help="only the K-th of N parts of the selection (every N-th mutant from the K-th), for a"
                            " CI matrix; `kmut merge` joins the N stores")

    def outputs(p):
        p.add_argument("--fail-under", dest="fail_under", type=percentage, default=None,
                       help="exit 1 when the score is below this percentage")
        p.add_argument("--json", dest="json", type=Path, default=None,
                       help="write the report in the mutation-testing-elements schema")
        p.add_argument("--html", dest="html", type=Path, default=None, help="write a self-contained HTML report")
        p.add_argument("--quiet", dest="quiet", action="store_true", help="no per-mutant table, only the summary")

    selection(commands.add_parser("list", help="list the mutants"), with_suite=False)
    show = commands.add_parser("show", help="show one mutant as a unified diff")
    show.add_argument("mutant_id", metavar="ID")
    selection(show, with_suite=False, with_only=False)

    run = commands.add_parser("run", help="run mutants against a suite and report")
    selection(run)
    shard(run)
    outputs(run)
    run.add_argument("--ray", dest="ray", nargs="?", const="", default=None, metavar="ADDRESS",
                     help="run each mutant as a task on a Ray cluster (needs the ray extra): the one at ADDRESS,"
                          " else the one RAY_ADDRESS names, else a new one on this machine; one GPU per task on"
                          " cuda, one CPU on cpu")
    run.add_argument("--jobs", dest="jobs", type=_positive, default=None,
                     help="workers side by side: on cpu in all (default: one per core), on cuda per visible GPU"
                          " (default: the cores shared out among the GPUs)")
    run.add_argument("--space-budget", dest="space_budget", type=_seconds, default=DEFAULT_SPACE_BUDGET, metavar="SECONDS",
                     help="seconds each mutant whose code matches the original on every configuration of the suite"
                          " may spend compiled on the rest of the declared space; one that runs out is not"
                          f" counted equivalent (default {DEFAULT_SPACE_BUDGET:g}; 0: no limit)")
    run.add_argument("--compile-log", dest="compile_log", type=Path, default=None,
                     help="on CUDA, write one JSON line per kernel a worker compiled or loaded from Triton's cache"
                          " (mutant, case, kernel, cache key, cached, seconds)")
    run.add_argument("--sanitize", dest="sanitize", action="store_true",
                     help="on CUDA, re-run the survivors under compute-sanitizer memcheck (each tensor its own"
                          " allocation): an out-of-bounds access kills the mutant")
    run.add_argument("--interpreter-check", dest="interpreter_check", action=argparse.BooleanOptionalAction,
                     default=None,
                     help="on CUDA, re-run the survivors and timeouts on Triton's CPU interpreter, which bounds-checks"
                          " every access, holds every compiler hint to its values and every launch's work to its"
                          " model: a failing case kills the mutant (default: on for CUDA runs where this machine's"
                          " Triton and numpy run the interpreter, off with --ray)")
    run.add_argument("--classify", dest="classify", choices=("before", "after", "never"), default=None,
                     help="when to classify device mutants by their compiled code: before running them (the default"
                          " on cuda, where a run compiles the kernels anyway, and on an emulator, which cannot tell"
                          " code the compiler refuses), after, only the survivors (the default on cpu, where the"
                          " interpreter runs the suite faster than its kernels compile), or never")
    run.add_argument("--no-classify", dest="classify", action="store_const", const="never",
                     help="the same as --classify never")

    report = commands.add_parser("report", help="report stored results")
    selection(report)
    shard(report)
    outputs(report)

    merge = commands.add_parser("merge", help="merge the stores of `kmut run --shard` 1/N to N/N and report them")
    merge.add_argument("shard_stores", nargs="+", type=Path, metavar="STORE", help="a shard's result store")
    store(merge, "the store the shards are merged into")
    outputs(merge)

    minimize = commands.add_parser("minimize", help="the smallest case subset that keeps every kill (needs --matrix"
                                                     " results), against the curated suite")
    selection(minimize, with_only=False)

    curate = commands.add_parser("curate", help="search a case that kills each survivor of the last run")
    selection(curate)
    curate.add_argument("--budget", dest="budget", type=_seconds, default=DEFAULT_CURATE_BUDGET, metavar="SECONDS",
                        help="seconds of its own cases each survivor's search may spend"
                             f" (default {DEFAULT_CURATE_BUDGET:g})")
    curate.add_argument("--write", dest="write", action="store_true",
                        help="add each killing case to the curated suite's data (suites/curated_additions.json)")
    curate.add_argument("--jobs", dest="jobs", type=_positive, default=None,
                        help="workers side by side (default: one per core on cpu, one per GPU on cuda)")
    return parser


def main(argv=None) -> int:
    from mutants.store import StoreError
    from mutants.worker import WorkerStartError

    parser = build_parser()
    args = parser.parse_args(argv)
    if sys.stdout is None:  # started with its standard output closed (`kmut ... >&-`)
        return _fail("standard output is closed: nowhere to print; redirect it to a file or /dev/null", EXIT_CANNOT_RUN)
    previous_handler = signal.signal(signal.SIGTERM, _terminate)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()
        return code
    except UsageError as error:
        return _fail(error, EXIT_USAGE)
    except OriginalDoesNotCompile as error:
        return _fail(error, EXIT_BASELINE)
    except (CannotRun, StoreError, WorkerStartError, MergeError) as error:
        return _fail(error, EXIT_CANNOT_RUN)
    except sqlite3.Error as error:
        if getattr(args, "store", None) and not Path(args.store).exists():
            return _fail(f"{args.store}: the result store was moved or deleted while kmut used it ({error})",
                         EXIT_CANNOT_RUN)
        return _fail(f"{args.store}: {error}", EXIT_CANNOT_RUN)
    except BrokenPipeError:  # the reader went away (`kmut list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except shutil.Error as error:  # a folder copy's failures, one (source, destination, why) each
        failures = error.args[0]
        if isinstance(failures, list) and failures:
            more = f" (and {len(failures) - 1} more file(s))" if len(failures) > 1 else ""
            return _fail(f"{failures[0][2]}{more}", EXIT_CANNOT_RUN)
        return _fail(error, EXIT_CANNOT_RUN)
    except OSError as error:
        return _fail(f"{error.filename}: {error.strerror}" if error.filename else error, EXIT_CANNOT_RUN)
    except KeyboardInterrupt as error:
        how = "terminated" if isinstance(error, Terminated) else "interrupted"
        print(f"kmut: {how}; finished mutants are in the store and the next run resumes", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(error, Terminated) else EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous_handler)


def _print_kept_answers(store, scope, mutants) -> None:
    """The mutants a stopped run left unfinished, with the cases the next run will not run again."""
    finished = store.finished_keys(scope)
    for mutant in mutants:
        if mutant.key not in finished:
            answered = store.unfinished(scope, mutant.key)
            if answered:
                print(f"kmut: {mutant.id}: {len(answered):,} case(s) answered are kept; the next run runs the rest",
                      file=sys.stderr)


def _terminate(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough; cleanup is under way
    raise Terminated


def _fail(error, code: int) -> int:
    print(f"kmut: error: {error}", file=sys.stderr)
    return code


# -- commands --

def cmd_list(args) -> int:
    mutants = _mutants(args.mutant_set, args.only, args.target)
    for mutant in mutants:
        change = f"{_one_line(mutant.before)} -> {_one_line(mutant.after)}"
        print(f"{mutant.id:<40} {mutant.side:<6} {mutant.path}:{mutant.line:<4} {change[:90]}")
    per_file = Counter((m.path, m.side) for m in mutants)
    for path in dict.fromkeys(m.path for m in mutants):
        sides = ", ".join(f"{per_file[path, side]} {side}" for side in (DEVICE, HOST) if per_file[path, side])
        print(f"{path}: {sides}")
    print(f"{len(mutants)} mutants ({args.mutant_set})")
    return EXIT_OK


def cmd_show(args) -> int:
    from mutants.mutant import read_source

    mutant = _find(args.mutant_id, args.mutant_set, args.target)
    print(f"{mutant.id}: {mutant.description}")
    if mutant.exposed_by:
        print(f"exposed by: {mutant.exposed_by}")
    print(mutant.diff(read_source(mutant.path)), end="")
    return EXIT_OK


def cmd_run(args) -> int:
    _check_outputs(args, args.store, *([args.compile_log] if args.compile_log else []))
    if args.ray is not None and args.compile_log:
        raise UsageError("--compile-log records this machine's workers; it does not combine with --ray")
    if args.ray is not None and args.sanitize:
        raise UsageError("--sanitize runs compute-sanitizer on this machine's GPU; it does not combine with --ray")
    if args.ray is not None and args.interpreter_check:
        raise UsageError("--interpreter-check runs on this machine's cores; it does not combine with --ray")
    print(f"kmut: loading torch and Triton, the {args.suite} suite and the {args.mutant_set} mutants",
          file=sys.stderr, flush=True)
    if args.ray is None:
        return _sweep(args, None)
    try:
        from mutants.ray_runner import join_cluster, leave_cluster
    except ImportError:
        raise CannotRun("--ray needs Ray: pip install -e '.[ray]'") from None
    cluster = join_cluster(args.ray or None, args.device)
    try:
        return _sweep(args, cluster)
    finally:
        leave_cluster(cluster)


def _interpreter_check(asked: bool | None, device: str, cluster) -> bool:
    """Whether the CUDA run's survivors go on to the interpreter check: as asked, else on
    for a run on this machine's GPUs."""
    if asked is not None:
        return asked
    return device == "cuda" and cluster is None


def _check_on_the_interpreter(runner, mutants: list, scope, clock, undecided: list = ()) -> None:
    """The interpreter check of a CUDA run's survivors (and of ``undecided`` mutants, paused
    after their first GPU cases); where it cannot be made, one line says why."""
    from mutants.interpreter_check import recheck
    from mutants.runner import BaselineError

    try:
        with clock.phase("interpreter check"):
            recheck(runner, mutants, interpreter_scope=replace(scope, digest=scope_digest("cpu"), device="cpu"),
                    jobs=_default_jobs("cpu"), undecided=undecided,
                    report=lambda line: print(f"kmut: interpreter check: {line}", file=sys.stderr))
    except BaselineError as error:  # the survivors stay survivors; the report says so above
        print(f"kmut: interpreter check not made: {error}", file=sys.stderr)


def _sweep(args, cluster) -> int:
    """Run the selection on this machine's workers, or as tasks on ``cluster`` (a Ray cluster joined)."""
    from mutants.interpreter_check import GPU_CASES_BEFORE_CHECK
    from mutants.runner import BaselineError, ProgressPrinter, Runner, holding_results

    cases = _cases(args.suite, args.target)
    if cluster is None:
        device = _device(args.device)
        digest, jobs, engine, where = scope_digest(device), args.jobs or _default_jobs(device), Runner, "worker(s)"
    else:
        from mutants.ray_runner import RayRunner

        device, digest, jobs, engine = cluster.device, cluster.digest, args.jobs or cluster.slots, RayRunner
        where = f"Ray task(s) at a time, {SLOT_NAMES[device]}"
    sanitizer = _sanitizer(device) if args.sanitize else None
    if args.interpreter_check and device != "cuda":
        raise UsageError("--interpreter-check checks CUDA runs; on the CPU every case runs on the interpreter already")
    interpreter_check = _interpreter_check(args.interpreter_check, device, cluster)
    progress = ProgressPrinter()
    runner = engine(cases=cases, device=device, jobs=jobs, store=None, scope=None, progress=progress,
                    space_budget=args.space_budget or None, target=TARGETS[args.target],
                    compile_cache=compile_cache_beside(args.store), emulate=args.emulate)
    compile_jobs = runner.jobs if cluster is None else _default_jobs("cpu")  # classification compiles here
    if args.compile_log:
        from mutants.clock import CompileLog

        args.compile_log.parent.mkdir(parents=True, exist_ok=True)
        runner.compile_log = CompileLog(args.compile_log)
    clock = runner.clock
    try:
        if cluster is None:
            runner.prestart()  # the workers start (torch, a CUDA context) while the mutants are built
        mutants = _selected(args)  # a selection error is a usage error, with nothing written yet
        runner.exposing = _declared_exposures(mutants, cases, args.target)
        runner.store, runner.scope = _open(args, device, create=True, digest=digest)
        store, scope = runner.store, runner.scope
        started = time.monotonic()
        run_id = store.start_run(scope, _selection_name(args), [c.id for c in cases])
        pools = f" ({jobs} per GPU on {len(runner.devices)})" if cluster is None and device == "cuda" else ""
        print(f"kmut: {len(mutants)} mutants x {len(cases)} cases of {args.suite} on {device},"
              f" {runner.jobs if cluster is None else jobs} {where}{pools}", file=sys.stderr)
        clock.add_phase("start-up", started - PROCESS_STARTED)  # torch, Triton, the suite, the mutants
        try:
            with clock.phase("baseline"):
                runner.baseline()
        except BaselineError as error:
            print(f"kmut: baseline: {error}", file=sys.stderr)
            return EXIT_BASELINE
        # on an emulator the compiler is still the judge of what compiles: code FlyDSL refuses is
        # stillborn before any case runs it, not a kill
        when = args.classify or ("before" if device == "cuda" or not runner.executes or runner.emulates else "after")
        classified = 0
        if when == "before":
            if cluster is None:
                runner.prestart()  # the workers start while the classifier compiles
            with clock.phase("classification"):  # the proof beyond the suite comes last
                classified = runner.classify(mutants, jobs=compile_jobs, progress=progress, beyond=False)
        # on CUDA the interpreter sees bugs no GPU case shows: a mutant still alive after its
        # first GPU cases goes there before the rest of them
        early_check = interpreter_check and not args.matrix
        with clock.phase("mutants"):
            executed = len(runner.run(mutants, matrix=args.matrix,
                                      pause_after=GPU_CASES_BEFORE_CHECK if early_check else None))
        undecided = [m for m in mutants if m.key not in holding_results(store, scope, mutants)] if early_check else []
        if undecided:
            print(f"kmut: interpreter check: the {len(undecided)} mutant(s) alive after {GPU_CASES_BEFORE_CHECK} GPU"
                  " cases, before their other cases", file=sys.stderr)
            _check_on_the_interpreter(runner, mutants, scope, clock, undecided=undecided)
            decided_there = set(holding_results(store, scope, undecided))
            with clock.phase("mutants"):
                executed += len(decided_there) + len(runner.run(mutants, matrix=False))
        if when == "after":
            with clock.phase("classification"):
                classified = runner.classify(mutants, jobs=compile_jobs, progress=progress, survivors=True)
        if sanitizer:
            with clock.phase("memcheck"):
                runner.sanitize(mutants, sanitizer=sanitizer, progress=progress)
        if interpreter_check:
            print("kmut: interpreter check: the survivors on Triton's CPU interpreter, every access bounds-checked"
                  " and every launch's work held to its model", file=sys.stderr)
            # those checked before their other GPU cases lived there: they are not checked again
            _check_on_the_interpreter(runner, [m for m in mutants if m not in undecided], scope, clock)
        if when == "before":
            with clock.phase("proof beyond the suite"):
                runner.classify(mutants, jobs=compile_jobs, progress=progress, survivors=True)
    except KeyboardInterrupt:  # where a stopped run's time went, for the run that resumes it
        print(f"kmut: {clock.summary()}; stopped in the last phase", file=sys.stderr)
        if runner.store is not None:
            _print_kept_answers(runner.store, runner.scope, mutants)
        raise
    finally:
        runner.close()
        if runner.compile_log is not None:
            runner.compile_log.close()
    # after the run, the mutants classified are among those executed: count them once
    store.finish_run(run_id, time.monotonic() - started, executed, classified if when == "before" else 0)
    with clock.phase("report"):
        code = _report(args, store, scope, mutants, cases)
    print(f"kmut: {clock.summary()}", file=sys.stderr)
    return code


def _declared_exposures(mutants, cases, target: str) -> dict[str, set[str]]:
    """For each catalog bug among ``mutants``, the ids of the cases its ``exposed_by`` names."""
    if target != "triton":
        return {}
    from mutants.catalog import CATALOG

    bugs = {bug.name: bug for bug in CATALOG}
    return {m.id: {case.id for case in bugs[m.id].exposed_by.cases(cases)}
            for m in mutants if m.origin == "catalog" and m.id in bugs}


def cmd_report(args) -> int:
    _check_outputs(args)
    device = _device(args.device)
    store, scope = _open(args, device, create=False)
    return _report(args, store, scope, _selected(args), _cases(args.suite, args.target))


def cmd_merge(args) -> int:
    from mutants.shards import merge
    from mutants.store import Store

    _check_outputs(args, args.store)
    merged = merge(args.shard_stores, Store(args.store), scope_digest)
    args.suite, args.matrix = merged.scope.suite, merged.scope.mode == "matrix"
    args.mutant_set, args.only = _parse_selection(merged.selection)
    args.shard, args.target = None, "triton"
    print(f"kmut: merged {len(args.shard_stores)} shards of {merged.selection} into {args.store}", file=sys.stderr)
    store, scope = _open(args, merged.scope.device, create=False, digest=merged.scope.digest)
    return _report(args, store, scope, _mutants(args.mutant_set, args.only), _cases(args.suite, args.target))


def cmd_minimize(args) -> int:
    from mutants.report import minimize

    device = _device(args.device)
    args.matrix = True
    store, scope = _open(args, device, create=False)
    scored = _scored(store, scope, _mutants(args.mutant_set, target=args.target), _cases(args.suite, args.target),
                     args.mutant_set)
    if not scored.complete:
        raise UsageError(f"the store has no complete kill matrix for this selection; run `kmut run --matrix"
                         f" --suite {args.suite} --mutants {args.mutant_set}` first")
    try:
        kept, idle = minimize(scored)
    except ValueError as error:
        raise UsageError(f"the kill matrix does not belong to this suite: {error}") from None
    print(f"{len(kept)} of {len(scored.case_ids)} cases keep every kill ({scored.counts['killed']} killed mutants):")
    for case_id in kept:
        print(f"  {case_id}")
    print(f"{len(idle)} cases kill nothing" + (":" if idle else ""))
    for case_id in idle:
        print(f"  {case_id}")
    cases = {case.id: case for case in _cases(args.suite, args.target)}
    print(against_curated(scored, kept, store.baseline(scope), [cases[case_id] for case_id in kept],
                          _cases("curated", args.target)))
    return EXIT_OK


def against_curated(scored, kept: list[str], seconds: dict[str, float], derived: list, curated: list) -> str:
    """The derived suite ``kept`` beside the curated one: the curated cases of the matrix that
    kill nothing, the kills no curated case makes, each suite's time by the baseline of the
    matrix run, and, for the catalog, the derived case that holds each bug's exposing axis."""
    from mutants.catalog import CATALOG
    from suites.cases import suite

    kills = scored.matrix()
    curated_ids = [case.id for case in curated]
    in_matrix = [case_id for case_id in curated_ids if case_id in kills]
    idle = [case_id for case_id in in_matrix if not kills[case_id]]
    covered = set().union(*(kills[case_id] for case_id in in_matrix))
    lacking = {mutant for case_id in kept for mutant in kills[case_id]} - covered
    lines = [f"against curated ({len(curated_ids)} cases, {len(in_matrix)} of them in this matrix):",
             f"{len(idle)} curated cases kill nothing here" + (":" if idle else "")]
    lines += [f"  {case_id}" for case_id in idle]
    lines.append(f"{len(lacking)} kills no curated case makes" + (":" if lacking else ""))
    lines += [f"  {mutant}: killed by {', '.join(c for c in kept if mutant in kills[c])}" for mutant in sorted(lacking)]

    def timed(name: str, case_ids: list[str]) -> str:
        known = [seconds[case_id] for case_id in case_ids if case_id in seconds]
        untimed = f", {len(case_ids) - len(known)} not run here" if len(known) < len(case_ids) else ""
        return f"  {name}: {len(case_ids)} cases, {sum(known):.1f} s of baseline for {len(known)}{untimed}"

    lines.append("time, the unmutated kernel's per case in the matrix run's baseline (one worker's seconds):")
    lines.append(timed("derived", kept))
    lines.append(timed("curated", curated_ids))
    if scored.suite != "exhaustive":
        lines.append(timed("exhaustive", [case.id for case in suite("exhaustive")]))
    if scored.mutant_set == "catalog":
        lines.append("each catalog bug's exposing axis in the derived suite:")
        for bug in CATALOG:
            holding = bug.exposed_by.cases(derived)
            where = holding[0].id if holding else "missing"
            lines.append(f"  {bug.name} ({bug.exposed_by.text}): {where}")
    return "\n".join(lines)


def cmd_curate(args) -> int:
    print(f"kmut: loading torch and Triton, the {args.suite} suite and the {args.mutant_set} mutants",
          file=sys.stderr, flush=True)
    from mutants.curate import describe, search
    from mutants.runner import SURVIVED, Runner
    from suites.candidates import TIERS
    from suites.cases import Case, add_case

    device = _device(args.device)
    store, scope = _open(args, device, create=True)
    mutants = _mutants(args.mutant_set, args.only, args.target)
    results = store.results(scope, {m.key: m.id for m in mutants})
    survivors = [m for m in mutants if (r := results.get(m.key)) and r.outcome == SURVIVED]
    if not survivors:
        raise UsageError(f"no survivors of the {args.mutant_set} mutants on {args.suite} ({scope.mode}) in"
                         f" {args.store}; run `kmut run` first")
    jobs = args.jobs or _default_jobs(device)
    started = time.monotonic()
    tiers = {name: draw(args.suite) for name, draw in TIERS.items()}
    print(f"kmut: {len(survivors)} survivors, {args.budget:g} s each, on {device} with {jobs} worker(s);"
          f" candidates: " + ", ".join(f"{name} {len(cases)}" for name, cases in tiers.items()), file=sys.stderr)
    runner = Runner(cases=[], device=device, jobs=jobs, store=store, scope=scope)
    try:
        leads = search(runner, store, scope, survivors, tiers, args.budget,
                       report=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        runner.close()
    suite_cases = [case for case in _cases(args.suite, args.target) if isinstance(case, Case)]
    for lead in leads:
        text, case, exposed = describe(lead, suite_cases)
        print(text)
        if case is None:
            continue
        print(f"  record: {json.dumps({'id': case.id, 'kills': lead.mutant.id, 'exposed_by': exposed, 'values': case.as_dict()})}")
        if args.write:
            print("  written to the curated suite's data" if add_case(case, lead.mutant.id, exposed)
                  else "  already in the curated suite's data")
    found = sum(lead.killer is not None for lead in leads)
    print(f"{found} of {len(leads)} survivors killed by a case found; {time.monotonic() - started:.0f} s wall")
    return EXIT_OK


COMMANDS = {"list": cmd_list, "show": cmd_show, "run": cmd_run, "report": cmd_report, "merge": cmd_merge,
            "minimize": cmd_minimize, "curate": cmd_curate}


# -- helpers --

def _report(args, store, scope, mutants, cases) -> int:
    from mutants.report import below_gate, terminal_table

    scored = _scored(store, scope, mutants, cases, _selection_name(args))
    if not scored.with_results and args.fail_under is None:
        raise UsageError(f"the store {args.store} has no results for suite {args.suite} on {scope.device}"
                         f" ({scope.mode}); run `kmut run` first")
    print(terminal_table(scored, per_mutant=not args.quiet))
    if args.json:
        from mutants.report import mutation_testing_json

        _write(args.json, json.dumps(mutation_testing_json(scored), indent=1))
    if args.html:
        from mutants.html import html_report

        _write(args.html, html_report([scored]))
    if args.fail_under is None:
        return EXIT_OK
    failure = below_gate(scored, args.fail_under)
    if failure is not None:
        print(f"kmut: {failure}", file=sys.stderr)
        return EXIT_BELOW_THRESHOLD
    return EXIT_OK


def _check_outputs(args, *written: Path) -> None:
    """Fail before any work when a report file, or another file ``written``, cannot be written."""
    for path in (args.json, args.html, *written):
        if path is None:
            continue
        existing = next(p for p in (path, *path.parents) if p.exists())
        if existing == path:
            usable = path.is_file() and os.access(path, os.W_OK)
        else:
            usable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
        if not usable:
            raise CannotRun(f"{path}: cannot be written ({existing} is not a writable "
                            f"{'file' if existing == path else 'folder'})")


def _write(path: Path, text: str) -> None:
    """Write a report file whole, or fail naming it and leave no truncated report behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.write_text(text)
    except OSError as error:  # a full disk names no file
        path.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from None


def _scored(store, scope, mutants, cases, mutant_set):
    from mutants.report import Scored, score_rows
    from mutants.runner import holding_results

    results = holding_results(store, scope, mutants)
    runs = [r for r in store.latest_runs() if (r["suite"], r["mode"], r["device"], r["mutant_set"], r["digest"])
            == (scope.suite, scope.mode, scope.device, mutant_set, scope.digest)]
    wall = runs[-1]["wall_seconds"] if runs else None
    processed = (runs[-1]["executed"] + runs[-1]["classified"]) if runs else None
    return Scored(scope.suite, scope.device, scope.mode, mutant_set, score_rows(mutants, results),
                  [c.id for c in cases], wall, processed)


def _open(args, device, *, create: bool, digest: str | None = None):
    """The store (read-only unless a run will write it) and the scope of this selection's
    results; ``digest`` when the scope's was found elsewhere (on a cluster's nodes)."""
    from mutants.store import Scope, Store

    if not create and not args.store.exists():
        raise UsageError(f"no result store at {args.store}; run `kmut run` first")
    store = Store(args.store, read_only=not create)
    # the Triton op's suites keep their bare names; another target's are prefixed with its name
    suite = args.suite if args.target == "triton" else f"{args.target}:{args.suite}"
    if device == "cpu" and TARGETS[args.target].emulator is not None and not getattr(args, "emulate", True):
        suite += " (not emulated)"  # compiled and classified only: other outcomes than the emulated run's
    scope = Scope(suite, digest or scope_digest(device), "matrix" if args.matrix else "first-kill", device)
    return store, scope


SLOT_NAMES = {"cpu": "one CPU each", "cuda": "one GPU each"}


def scope_digest(device: str, root: Path | None = None) -> str:
    """What a result depends on besides its mutant: the kernel, oracle and suites, kmut's own
    code, the torch and Triton versions, and the name of every visible GPU."""
    import torch

    import kernel  # noqa: F401  (selects Triton's backend, before triton is imported)
    import triton

    from mutants.mutant import PROJECT_ROOT, source_digest

    root = root or PROJECT_ROOT
    digest = hashlib.sha256(source_digest(root).encode())
    for path in sorted((root / "mutants").glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    gpus = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}) if device == "cuda" else []
    for part in (torch.__version__, triton.__version__, *gpus):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:20]


def _device(requested: str | None) -> str:
    from suites.runnable import resolve_device

    try:
        return resolve_device(requested)
    except ValueError as error:
        raise UsageError(f"--device {error}") from None


def _sanitizer(device: str) -> str:
    from mutants.sanitize import SanitizerMissing, find_sanitizer

    if device != "cuda":
        raise UsageError("--sanitize checks CUDA runs; on the CPU the interpreter bounds-checks every access already")
    try:
        return find_sanitizer()
    except SanitizerMissing as error:
        raise CannotRun(str(error)) from None


def _default_jobs(device: str) -> int:
    """Workers in all on the CPU, per GPU on CUDA: one per core, the cores shared out among the GPUs."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if device == "cuda":
        import torch

        return max(1, cores // max(1, torch.cuda.device_count()))
    return cores


def _cases(suite: str, target: str):
    return TARGETS[target].cases(suite)


def _selection_name(args) -> str:
    selection = args.mutant_set if args.only is None else f"{args.mutant_set} --only {args.only}"
    return sharded_selection(selection, args.shard)


def _parse_selection(name: str) -> tuple[str, str | None]:
    """The mutant set and ``--only`` of a selection name (`_selection_name` without a shard)."""
    mutant_set, _, only = name.partition(" --only ")
    return mutant_set, only or None


def _mutants(mutant_set: str, only: str | None = None, target: str = "triton"):
    from mutants.catalog import CatalogError
    from mutants.sets import select_mutants

    try:
        mutants = select_mutants(mutant_set, target=TARGETS[target])
    except CatalogError as error:
        raise UsageError(str(error)) from None
    if only is None:
        return mutants
    wanted = {part.strip() for part in only.split(",")} - {""}
    unknown = sorted(wanted - {m.id for m in mutants})
    if unknown or not wanted:
        raise UsageError(f"--only: no mutant {unknown[0]!r} in the set {mutant_set}" if unknown
                         else "--only: no mutant ids given")
    return [m for m in mutants if m.id in wanted]


def _selected(args):
    """The mutants of the selection, or of its shard."""
    mutants = _mutants(args.mutant_set, args.only, args.target)
    return args.shard.select(mutants) if args.shard else mutants


def _find(mutant_id: str, mutant_set: str, target: str):
    mutants = _mutants(mutant_set, target=target)
    for mutant in mutants:
        if mutant.id == mutant_id:
            return mutant
    if mutant_set != "all":
        for mutant in _mutants("all", target=target):
            if mutant.id == mutant_id:
                return mutant
    raise UsageError(f"no mutant {mutant_id!r}; `kmut list --mutants all` lists them")


def _one_line(code: str) -> str:
    return " ".join(code.split())


if __name__ == "__main__":
    sys.exit(main())
