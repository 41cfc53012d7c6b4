"""``reconciler plan``: what would be dispatched now, what waits and why; with ``--base``,
what a change to the config repo would do (for pull requests).

The command is thin: reading files and Git goes through adapters, everything else is the
pure functions below (``run_plan``, ``run_plan_diff``), which take loaders and a planner.
The planner is the cycle's own ``decide`` over the clusters (``--live``) or over what the
status branch last recorded, with the status branch as memory: the plan is the one the
next ``reconciler run`` cycle makes. Only ``--observed FILE`` plans a given state as is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import click
import git

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.git import CacheError, GitSyncError
from reconciler.adapters.repo import (
    RevisionError,
    has_ref,
    is_git_repo,
    read_capped,
    snapshot_checkout,
    snapshot_git,
)
from reconciler.cli.options import (
    cache_dir_option,
    cluster_kubeconfig_option,
    parse_overrides,
    repo_dir_option,
    status_repo_option,
)
from reconciler.cli.status_cmd import StatusError, read_branch
from reconciler.core.compile import compile_repo
from reconciler.core.decision.cycle import Memory, decide, listing_from_status, memory_from_status
from reconciler.core.decision.schedule import known_runs, with_ticks
from reconciler.core.observation.observed import ObservedFileError, parse_observed
from reconciler.core.plan import Plan, PlanInputError, plan_repo
from reconciler.core.plan.estimate import (
    NO_ESTIMATES,
    Estimates,
    estimate_decision,
    estimate_starts,
)
from reconciler.core.plan.history import WhatIf, compare_replays, recorded_runs, replay_runs
from reconciler.core.plan.ledger import EARLIEST, LATEST, utc_text
from reconciler.core.reporting.status import StatusView
from reconciler.core.types import (
    CompiledRepo,
    InternalError,
    ObservedOperation,
    RepoSnapshot,
    printable_path,
)
from reconciler.core.views.diff import (
    PlanDiff,
    diff_plans,
    diff_to_dict,
    diff_to_json,
    diff_to_markdown,
)
from reconciler.core.views.plan_render import plan_to_json, plan_to_markdown, plan_to_table
from reconciler.core.views.replay_render import replay_to_dict, replay_to_markdown
from reconciler.runtime.live import ClusterReads, Connect, connector, unreachable_warnings

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 3

STATUS_BRANCH = "reconciler/status"
OUTPUTS = ("table", "json", "markdown")


@dataclass(frozen=True)
class Outcome:
    stdout: str
    stderr: str
    exit_code: int


class LoadError(Exception):
    """A revision could not be read or compiled; ``lines`` are printed as they are."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


# --- pure logic -----------------------------------------------------------------------


def render_plan(plan: Plan, output: str, estimates: Estimates = NO_ESTIMATES) -> str:
    if output == "json":
        return plan_to_json(plan, estimates)
    if output == "markdown":
        return plan_to_markdown(plan, estimates)
    return plan_to_table(plan, estimates)


def render_diff(diff: PlanDiff, output: str, replay: Replayed | None = None) -> str:
    """The PR plan; with ``replay``, its what-if section (``replay`` in the JSON)."""
    if replay is None:
        return diff_to_json(diff) if output == "json" else diff_to_markdown(diff)
    what, span = replay
    if output == "json":
        data = {**diff_to_dict(diff), "replay": replay_to_dict(what, span)}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return diff_to_markdown(diff) + replay_to_markdown(what, span)


def diff_exit_code(diff: PlanDiff) -> int:
    """0: nothing changes; 3: the change alters config or the plan."""
    return EXIT_CHANGES if diff.has_changes else EXIT_OK


def compile_errors(repo: CompiledRepo, label: str) -> list[str]:
    if repo.valid:
        return []
    return [f"{label} does not compile ({len(repo.errors)} error(s)):"] + [
        str(e) for e in sorted(repo.errors)
    ]


def _warnings(plan: Plan) -> str:
    return f"warning: {plan.prune_refused.message()}\n" if plan.prune_refused else ""


class Planned(NamedTuple):
    plan: Plan
    estimates: Estimates  # when each pending operation starts (docs/estimates.md)
    notes: list[str]  # warnings for stderr
    # warnings about the config itself that a PR comment (markdown) shows too, e.g. a
    # flavor whose nodeLabels match no node of the clusters read (--live only)
    config_warnings: tuple[str, ...] = ()


# A compiled repo -> its plan, its estimates and warnings. Raises PlanInputError.
Planner = Callable[[CompiledRepo], Planned]
# (base, head) -> the what-if replay of the recorded history under each (docs/pull-requests.md)
Replayer = Callable[[CompiledRepo, CompiledRepo], WhatIf]
Replayed = tuple[WhatIf, str]  # the replay and its window as asked (``7d``)

# ``--replay``: days, hours and minutes, at least one (``7d``, ``36h``, ``1d12h``); ASCII
# digits only (``\d`` alone takes an Arabic-Indic seven for 7, shown then as typed)
_SPAN = re.compile(r"^(?=\d)(?:(\d{1,4})d)?(?:(\d{1,5})h)?(?:(\d{1,6})m)?$", re.ASCII)
MAX_REPLAY = timedelta(days=92)
NO_HISTORY = (
    f"warning: --replay: no {STATUS_BRANCH} branch to read runs from (a CI checkout fetches "
    f"it: git fetch --depth=1 origin {STATUS_BRANCH}:refs/remotes/origin/{STATUS_BRANCH})"
)


def parse_span(text: str) -> timedelta | None:
    """``7d``, ``36h``, ``1d12h``, ``90m``: a replay window; None when ``text`` is not one
    or is empty."""
    match = _SPAN.fullmatch(text)
    if match is None:
        return None
    d, h, m = (int(g) if g else 0 for g in match.groups())
    span = timedelta(days=d, hours=h, minutes=m)
    return span if span > timedelta(0) else None


def history_replayer(recorded: StatusView | None, now: datetime, span: timedelta) -> Replayer:
    """The last ``span`` before ``now`` of the status branch's ledger, replayed under each
    revision (``core/plan/history.py``). A ledger with entries that cannot be read is refused
    (a replay of part of the history would mislead): ``LoadError``, one line."""
    if recorded is not None and recorded.ledger_problems.messages:
        raise LoadError(
            [
                "error: --replay: the status branch's ledger cannot be replayed: "
                + recorded.ledger_problems.messages[0]
            ]
        )
    entries = recorded.ledger if recorded is not None else ()
    since = now - span

    def replay(base: CompiledRepo, head: CompiledRepo) -> WhatIf:
        submitted = {
            op.id: op.submitted_at
            for repo in (base, head)
            for op in repo.operations
            if op.submitted_at is not None
        }
        runs = recorded_runs(entries, submitted, since, now)
        sides = [
            (repo, replay_runs(repo, runs, since, now, prior=entries)) for repo in (base, head)
        ]
        return compare_replays(sides[0], sides[1], entries, now)

    return replay


def observed_planner(observed: Sequence[ObservedOperation], now: datetime) -> Planner:
    """``--observed FILE``: the given phases, planned as they are (no run times and no
    history: a run is estimated by its timeout, else unknown)."""

    runs = known_runs((o.operation, o.phase.active) for o in observed)

    def plan_of(repo: CompiledRepo) -> Planned:
        repo = with_ticks(repo, runs, now)  # the runs its schedules make now
        plan = plan_repo(repo, observed, now)
        return Planned(plan, estimate_starts(repo, plan, observed, {}, (), now), [])

    return plan_of


def recorded_planner(recorded: StatusView | None, now: datetime) -> Planner:
    """The next cycle's plan if the clusters are as the status branch last recorded them:
    its workloads, the clusters its last cycle could not read and the capacity it
    observed (a fleet queue's choice of cluster). No status branch:
    nothing dispatched yet."""
    memory = Memory() if recorded is None else memory_from_status(recorded)  # once for both

    def plan_of(repo: CompiledRepo) -> Planned:
        decision = decide(repo, listing_from_status(repo, recorded, memory), memory, now)
        notes = memory.ledger.problems.warnings()
        return Planned(decision.plan, estimate_decision(repo, decision), notes)

    return plan_of


def live_planner(memory: Memory, now: datetime, connect: Connect) -> Planner:
    """``--live``: the next cycle's plan over the clusters as they are now, each read once
    (with ``--base``, both revisions are planned over the same read)."""
    reads = ClusterReads(connect)

    def plan_of(repo: CompiledRepo) -> Planned:
        decision = decide(repo, reads(repo), memory, now)
        flavors = reads.flavor_warnings(repo)
        notes = [*memory.ledger.problems.warnings(), *unreachable_warnings(decision), *flavors]
        return Planned(decision.plan, estimate_decision(repo, decision), notes, tuple(flavors))

    return plan_of


def run_plan(load: Callable[[], CompiledRepo], planner: Planner, output: str) -> Outcome:
    """``reconciler plan``: compile, plan, render."""
    try:
        repo = load()
    except LoadError as exc:
        return Outcome("", "\n".join(exc.lines) + "\n", EXIT_ERROR)
    errors = compile_errors(repo, "the config repo")
    if errors:
        return Outcome("", "\n".join(errors) + "\n", EXIT_ERROR)
    try:
        plan, estimates, notes, config_warnings = planner(repo)
    except PlanInputError as exc:
        return Outcome("", f"error: {exc}\n", EXIT_ERROR)
    stderr = "".join(f"{n}\n" for n in notes) + _warnings(plan)
    stdout = render_plan(plan, output, estimates) + _markdown_warnings(config_warnings, output)
    return Outcome(stdout, stderr, EXIT_OK)


def run_plan_diff(
    load_base: Callable[[], CompiledRepo],
    load_head: Callable[[], CompiledRepo],
    planner: Planner,
    output: str,
    labels: tuple[str, str] = ("base", "head"),
    replay: tuple[Replayer, str] | None = None,
) -> Outcome:
    """``reconciler plan --base REF --head REF``: both revisions against the same observed
    state and clock (with ``replay``, the recorded history replayed under each, and the
    window as asked). Exit 0 without changes, 3 with changes, 1 on error."""
    repos: list[CompiledRepo] = []
    lines: list[str] = []
    for load, label in ((load_base, labels[0]), (load_head, labels[1])):
        try:
            repo = load()
        except LoadError as exc:
            lines.extend(exc.lines)
            continue
        lines.extend(compile_errors(repo, label))
        repos.append(repo)
    if lines:
        unique = dict.fromkeys(lines)  # e.g. the same unreadable repo for both refs
        return Outcome("", "\n".join(unique) + "\n", EXIT_ERROR)
    base, head = repos
    try:
        (base_plan, base_est, _, _), (head_plan, head_est, notes, config_warnings) = (
            planner(base),
            planner(head),
        )
    except PlanInputError as exc:
        return Outcome("", f"error: {exc}\n", EXIT_ERROR)
    diff = diff_plans((base, base_plan), (head, head_plan), (base_est, head_est))
    replayed = None
    if replay is not None:
        try:
            replayed = (replay[0](base, head), replay[1])
        except PlanInputError as exc:
            return Outcome("", f"error: --replay: {exc}\n", EXIT_ERROR)
    stderr = "".join(f"{n}\n" for n in notes) + _warnings(head_plan)
    stdout = render_diff(diff, output, replayed) + _markdown_warnings(config_warnings, output)
    return Outcome(stdout, stderr, diff_exit_code(diff))


def _markdown_warnings(warnings: Sequence[str], output: str) -> str:
    """The config warnings as a list after a markdown plan (a PR comment); the other
    outputs give them on stderr only."""
    if output != "markdown" or not warnings:
        return ""
    return "\n**Warnings**\n\n" + "".join(f"- {w}\n" for w in warnings)


# --- wiring ---------------------------------------------------------------------------


def _compile(snapshot: RepoSnapshot) -> CompiledRepo:
    return compile_repo(snapshot)


# What reading a revision may meet that is not a bug: an unreadable file, a ref that names
# no commit, a failing or missing git, objects missing from a shallow or broken clone.
_UNREADABLE = (OSError, RevisionError, git.exc.GitError, git.exc.ODBError)


def _snapshot(call: Callable[[], Any], what: str) -> RepoSnapshot:
    try:
        snap: RepoSnapshot = call()
    except LoadError:
        raise
    except _UNREADABLE as exc:  # the adapter's I/O boundary: report, never a traceback
        raise LoadError([f"error: cannot read {what}: {exc}"]) from None
    except Exception as exc:  # a bug in the reader, not a problem of the revision
        raise InternalError(f"reading {what}", exc) from exc
    return snap


def _worktree_loader(root: Path) -> Callable[[], CompiledRepo]:
    def load() -> CompiledRepo:
        return _compile(_snapshot(lambda: snapshot_checkout(root), str(root)))

    return load


def _git_loader(root: Path, ref: str) -> Callable[[], CompiledRepo]:
    def load() -> CompiledRepo:
        return _compile(_snapshot(lambda: snapshot_git(root, ref), f"{ref} in {root}"))

    return load


def read_observed(path: Path | None) -> tuple[ObservedOperation, ...]:
    if path is None:
        return ()
    try:
        content = read_capped(path)  # /dev/zero or a huge file: one byte past the limit
    except OSError as exc:
        where = printable_path(str(path))
        raise LoadError([f"{where}:0:0: cannot read: {exc.strerror or exc}"]) from None
    try:
        return parse_observed(content, str(path))
    except ObservedFileError as exc:
        raise LoadError([str(e) for e in exc.errors]) from None


# RFC 3339's date-time: a full date, a full time with an optional fraction, and an offset.
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)


def parse_now(text: str) -> datetime | None:
    """An RFC 3339 time (``2026-01-01T12:00:00Z``, ``2026-01-01T13:00:00+01:00``); None when
    ``text`` is not one (the offset is required: a local time would plan differently on
    each reviewer's machine), in UTC. Fractions past microseconds are cut."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    date, clock, fraction, zone = match.groups()
    micros = f".{(fraction + '00000')[:6]}" if fraction else ""
    offset = "+00:00" if zone in "Zz" else zone
    try:
        given = datetime.fromisoformat(f"{date}T{clock}{micros}{offset}")
    except ValueError:  # a date or time that does not exist: 2026-02-30, 25:00
        return None
    try:
        return given.astimezone(UTC)  # as the clock gives it: the plan's times read in UTC
    except OverflowError:  # year 1 or 9999 shifted past a datetime's range: the nearest end
        return (datetime.min if given.year == 1 else datetime.max).replace(tzinfo=UTC)


def status_on_branch(
    repo_dir: Path, status_repo: str | None = None, cache_dir: Path | None = None
) -> StatusView | None:
    """What the reconciler last wrote to the status branch: the local branch, else a
    clone's ``origin/`` copy (a PR checkout has only that); None when there is neither
    (or no Git repo), so every operation counts as Queued. With ``status_repo`` (the
    status kept apart, ``status.repo``), its status branch's tip, fetched. The repo cache
    is used only to read a branch that exists: a cache that cannot be made
    (:class:`CacheError`) is an error then, and nothing without one."""
    if not is_git_repo(repo_dir):
        return None
    if status_repo:
        try:
            return read_branch(str(repo_dir), STATUS_BRANCH, cache_dir, status_repo=status_repo)
        except StatusError:
            return None
    for ref in (f"refs/heads/{STATUS_BRANCH}", f"refs/remotes/origin/{STATUS_BRANCH}"):
        if not has_ref(repo_dir, ref):
            continue
        try:
            return read_branch(str(repo_dir), STATUS_BRANCH, cache_dir, ref=ref)
        except CacheError:
            raise
        except (StatusError, GitSyncError):
            continue
    return None


def memory_on_status_branch(
    repo_dir: Path, status_repo: str | None = None, cache_dir: Path | None = None
) -> Memory:
    view = status_on_branch(repo_dir, status_repo, cache_dir)
    return Memory() if view is None else memory_from_status(view)


@click.command("plan")
@repo_dir_option
@click.option(
    "--observed",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML or JSON list of {operation, phase}; unlisted operations are Queued. "
    "Default: the phases on the reconciler/status branch, if any.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Read the clusters themselves and plan as the next cycle would.",
)
@cluster_kubeconfig_option
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table: the queue view and lists; json: the plan contract; markdown: for a PR comment.",
)
@click.option("--base", help="Plan a change: the Git ref it starts from (e.g. origin/main).")
@click.option("--head", help="With --base: the ref of the change.  [default: HEAD]")
@click.option(
    "--now",
    "now_text",
    metavar="TIME",
    help="Plan at this instant, an RFC 3339 time such as 2026-01-01T12:00:00Z (default: the "
    "clock): budgets' windows, schedules and start estimates are then reproducible.",
)
@click.option(
    "--replay",
    "replay_text",
    metavar="SPAN",
    help="With --base: replay the last SPAN of recorded runs (e.g. 7d, 36h) under base and "
    "under head, and show per queue what the change does to waits, use and budgets.",
)
@status_repo_option
@cache_dir_option
def plan(
    repo_dir: Path,
    observed: Path | None,
    live: bool,
    cluster_kubeconfigs: tuple[str, ...],
    output: str,
    base: str | None,
    head: str | None,
    now_text: str | None,
    replay_text: str | None,
    status_repo: str | None,
    cache_dir: Path | None,
) -> None:
    """Show what would be dispatched now, what waits and why, and what would stop.

    With --base, compile and plan both revisions against the same observed state and show
    what the change does; exit 0 when nothing changes, 3 when something does, 1 on error.
    """
    if head is not None and base is None:
        raise click.UsageError("--head needs --base")
    if live and observed:
        raise click.UsageError("--live and --observed are exclusive")
    if replay_text is not None and base is None:
        raise click.UsageError("--replay needs --base")
    span = None
    if replay_text is not None:
        span = parse_span(replay_text)
        if span is None or span > MAX_REPLAY:
            why = "is longer than 92d" if span is not None else "is not a span such as 7d or 36h"
            click.echo(f"error: --replay: {replay_text[:60]!r} {why}", err=True)
            raise SystemExit(EXIT_ERROR)
    if now_text is None:
        now = SystemClock().now()
    else:
        given = parse_now(now_text)
        if given is None:
            click.echo(
                f"error: --now: {now_text[:60]!r} is not an RFC 3339 time "
                "(e.g. 2026-01-01T12:00:00Z or 2026-01-01T13:00:00+01:00)",
                err=True,
            )
            raise SystemExit(EXIT_ERROR)
        if not EARLIEST <= given < LATEST:  # budget windows and estimates around it must fit
            click.echo(
                f"error: --now: {now_text[:60]!r} is out of range "
                f"({utc_text(EARLIEST)} to {utc_text(LATEST)})",
                err=True,
            )
            raise SystemExit(EXIT_ERROR)
        now = given
    planner: Planner
    replay: tuple[Replayer, str] | None = None
    try:
        if span is not None and replay_text is not None:
            recorded = status_on_branch(repo_dir, status_repo, cache_dir)
            if recorded is None:  # else "no run arrived" reads as a quiet week
                click.echo(NO_HISTORY, err=True)
            replay = (history_replayer(recorded, now, span), replay_text)
        if observed:
            planner = observed_planner(read_observed(observed), now)
        elif live:
            planner = live_planner(
                memory_on_status_branch(repo_dir, status_repo, cache_dir),
                now,
                connector(parse_overrides(cluster_kubeconfigs)),
            )
        else:
            planner = recorded_planner(status_on_branch(repo_dir, status_repo, cache_dir), now)
    except LoadError as exc:
        click.echo("\n".join(exc.lines), err=True)
        raise SystemExit(EXIT_ERROR) from None
    except GitSyncError as exc:  # --status-repo given and not read, or no repo cache
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from None
    if base is None:
        outcome = run_plan(_worktree_loader(repo_dir), planner, output)
    else:
        head_ref = head or "HEAD"
        outcome = run_plan_diff(
            _git_loader(repo_dir, base),
            _git_loader(repo_dir, head_ref),
            planner,
            output,
            labels=(f"base {base}", f"head {head_ref}"),
            replay=replay,
        )
    if outcome.stdout:
        click.echo(outcome.stdout, nl=False)
    if outcome.stderr:
        click.echo(outcome.stderr, err=True, nl=False)
    raise SystemExit(outcome.exit_code)
