"""``reconciler submit`` and ``reconciler rerun``: a change to one operation file,
validated with the whole repo, committed as the local Git identity and pushed, the Git
way (to the config branch, or to a new branch for a pull request); then the plan for it.

Git is the only write path (docs/concepts.md): these commands only make the commit a
person would make, and the reconciler dispatches it on its next cycle."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click

from reconciler.adapters.clock import SystemClock
from reconciler.adapters.git import GitSyncError, PushRefused, WorkClone, redact
from reconciler.adapters.repo import snapshot_checkout
from reconciler.cli.options import cache_dir_option, status_repo_option
from reconciler.cli.plan_cmd import (
    STATUS_BRANCH,
    LoadError,
    _snapshot,
    recorded_planner,
    status_on_branch,
)
from reconciler.cli.status_cmd import watch_operation
from reconciler.core.authoring.submit import (
    SubmitErrors,
    add_presets,
    apply_params,
    bump_generation,
    name_problem,
    operation_name,
    parse_param,
    set_queue,
    set_stopped,
)
from reconciler.core.compile import compile_repo
from reconciler.core.decision.schedule import next_fires
from reconciler.core.plan import PlanInputError
from reconciler.core.types import CompiledRepo

EXIT_ERROR = 1


class Refused(Exception):
    """Printed line by line on stderr; exit 1. Nothing is left written."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


@dataclass(frozen=True)
class Delivery:
    mode: str  # "push", "branch" or "auto"
    branch: str | None  # --branch NAME
    config_branch: str
    status_repo: str | None = None  # --status-repo: where the status branch is read


# --- where the commit goes ----------------------------------------------------------------


def pull_request_url(remote: str, base: str, branch: str) -> str | None:
    """The page that opens a pull (merge) request from ``branch`` into ``base``, for the
    hosts whose URL scheme is known; None for any other remote."""
    m = re.match(
        r"^(?:https?://(?:[^@/]+@)?|ssh://(?:[^@/]+@)?|[\w.-]+@)([\w.-]+)[:/](.+?)(?:\.git)?/?$",
        remote,
    )
    if not m:
        return None
    host, path = m.group(1), m.group(2)
    if host == "github.com":
        return f"https://github.com/{path}/compare/{base}...{branch}?expand=1"
    if host == "gitlab.com" or host.startswith("gitlab."):
        return (
            f"https://{host}/{path}/-/merge_requests/new"
            f"?merge_request%5Bsource_branch%5D={branch}&merge_request%5Btarget_branch%5D={base}"
        )
    if host == "bitbucket.org":
        return f"https://bitbucket.org/{path}/pull-requests/new?source={branch}&dest={base}"
    return None


def _up_to_date(clone: WorkClone, config_branch: str) -> None:
    """The commit goes on top of the config branch as the remote has it: a clone behind it
    or ahead of it (commits not pushed yet) is refused, so nothing else is pushed along."""
    if clone.remote_url() is None:
        return
    tip = clone.remote_tip(config_branch)
    head = clone.head()
    if tip is not None and tip != head:
        raise Refused(
            [
                f"error: {clone.path} is at {head[:12]}, not at origin/{config_branch} "
                f"({tip[:12]}): check out {config_branch} and pull (or push) first"
            ]
        )


def _dirty(clone: WorkClone, own: str | None = None) -> None:
    """Refuse uncommitted changes, but for ``own``: the submitted file itself, written
    where it goes in the clone and not committed yet."""
    changed = [p for p in clone.uncommitted() if p != own]
    if changed:
        raise Refused(
            [
                f"{clone.path / p}:1:1: uncommitted change: commit or stash it first "
                "(the commit must hold only this change)"
                for p in changed
            ]
        )


def deliver(
    clone: WorkClone, before: str, sha: str, what: str, how: Delivery, echo: Callable[[str], None]
) -> bool:
    """Push ``sha`` (the commit on top of ``before``). True when it is on the config
    branch, False when it waits on a branch for review. A refused ``--push`` undoes
    the commit and raises :class:`Refused`."""
    remote = clone.remote_url()
    default_branch = f"submit/{what.replace('/', '-')}-{datetime.now(UTC):%Y%m%d%H%M%S}"
    if remote is None:
        if how.mode == "branch":
            clone.branch_at(how.branch or default_branch, sha)
            clone.undo(before)
            echo(f"committed {sha[:12]} on branch {how.branch or default_branch} (no remote)")
            return False
        echo(f"committed {sha[:12]} to {clone.current_branch() or 'HEAD'} (no remote to push to)")
        return True
    if how.mode in ("push", "auto"):
        try:
            clone.push(sha, how.config_branch)
            echo(f"pushed {sha[:12]} to {redact(remote)} {how.config_branch}")
            return True
        except PushRefused as exc:
            if how.mode == "push":
                clone.undo(before)
                raise Refused([f"error: {exc} (the commit was undone; try --branch)"]) from None
            echo(f"{exc}: pushing to a branch for a pull request instead")
        except GitSyncError as exc:
            clone.undo(before)
            raise Refused([f"error: {exc} (the commit was undone)"]) from None
    name = how.branch or default_branch
    try:
        clone.push(sha, name)
    except GitSyncError as exc:
        clone.undo(before)
        raise Refused([f"error: {exc} (the commit was undone)"]) from None
    clone.branch_at(name, sha)
    clone.undo(before)  # the config branch stays as it is until the request is merged
    echo(f"pushed {sha[:12]} to {redact(remote)} branch {name}")
    url = pull_request_url(remote, how.config_branch, name)
    echo(
        f"open a pull request: {url}"
        if url
        else f"open a pull request from {name} into {how.config_branch} on {redact(remote)}"
    )
    return False


# --- the plan for one operation ---------------------------------------------------------


def plan_lines(
    compiled: CompiledRepo,
    clone: WorkClone,
    op_ids: Sequence[str],
    status_repo: str | None = None,
    cache_dir: Path | None = None,
) -> list[str]:
    """What the next cycle does with ``op_ids``, as ``reconciler plan`` plans it (the
    status branch as the clusters, of ``status_repo`` when set): queue, cluster,
    dispatched now or position and reason, and the start estimate."""
    if status_repo is None:
        clone.fetch_status(STATUS_BRANCH)
    try:
        view = status_on_branch(clone.path, status_repo, cache_dir)
    except GitSyncError as exc:
        return [f"plan: unavailable: {exc}"]
    planner = recorded_planner(view, SystemClock().now())
    try:
        plan, estimates, *_ = planner(compiled)
    except PlanInputError as exc:
        return [f"plan: unavailable: {exc}"]
    dispatch = {d.operation: d for d in plan.dispatch}
    pending = {p.operation: p for p in plan.pending}
    positions = plan.positions()
    clusters = {o.id: o.cluster for o in compiled.operations}
    scheduled = {o.id: o.schedule for o in compiled.schedules if o.schedule is not None}
    now = SystemClock().now()
    lines = []
    for op in op_ids:
        if op in scheduled:  # a template: its runs are made at its fire times
            fires = ", ".join(t.isoformat() for t in next_fires(scheduled[op], now, 3))
            lines.append(
                f"plan: {op}: scheduled, never dispatched itself; next runs {fires or 'none'}"
            )
        elif op in dispatch:
            d = dispatch[op]
            flavor = f", flavor {d.flavor}" if d.flavor else ""
            lines.append(
                f"plan: {op}: queue {d.queue}, cluster {d.cluster}{flavor}: "
                "dispatched at the next cycle"
            )
        elif op in pending:
            p = pending[op]
            estimate = estimates.text(op) or "unknown"
            lines.append(
                f"plan: {op}: queue {p.queue}, cluster {clusters.get(op, '?')}: pending, "
                f"position {positions[op]}, {p.reason.value}: {p.message}; starts {estimate}"
            )
        else:
            lines.append(f"plan: {op}: nothing to dispatch (it is running or has run)")
    return lines


# --- shared -------------------------------------------------------------------------------


def open_clone(repo: str, config_branch: str, cache_dir: Path | None) -> WorkClone:
    path = Path(repo).expanduser()
    if "://" not in repo and not re.match(r"^[\w.-]+@[\w.-]+:", repo):
        if not path.is_dir():
            raise Refused([f"error: --repo {repo}: no such directory"])
        return WorkClone(path)
    return WorkClone.cached(repo, config_branch, cache_dir)


def _compile_tree(clone: WorkClone) -> CompiledRepo:
    try:
        return compile_repo(_snapshot(lambda: snapshot_checkout(clone.path), str(clone.path)))
    except LoadError as exc:
        raise Refused(exc.lines) from None


def _op_ids(compiled: CompiledRepo, project: str, name: str) -> list[str]:
    """The operation, or a workflow's children."""
    op = f"{project}/{name}"
    mine = [
        o.id
        for o in compiled.operations
        if o.project == project
        and (o.name == name or (o.workflow is not None and o.workflow.parent == op))
    ]
    return mine or [f"{project}/{name}"]


def write_and_commit(
    clone: WorkClone,
    rel: str,
    content: bytes,
    message: str,
    how: Delivery,
    op: str,
    watch: bool,
    generation: int,
    cache_dir: Path | None,
) -> None:
    """Validate the repo with ``rel`` written, commit, deliver, plan, and watch."""
    echo = click.echo
    target = clone.path / rel
    existed = target.exists()
    old = target.read_bytes() if existed else None
    before = clone.head()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    try:
        compiled = _compile_tree(clone)
    finally:
        if old is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(old)
    if not compiled.valid:
        raise Refused(
            [f"error: the config repo would not compile with {rel}:"]
            + [str(e) for e in sorted(compiled.errors)]
        )
    project, name = op.split("/", 1)
    rejected = [r for r in compiled.rejected if r.operation in _op_ids(compiled, project, name)]
    if rejected:
        raise Refused(
            [
                (f"{r.location}: " if r.location else f"{r.path}:1:1: ")
                + f"{r.reason.value}: {r.message}"
                for r in rejected
            ]
        )
    try:
        sha = clone.commit({rel: content}, message)
    except GitSyncError as exc:
        raise Refused([f"error: cannot commit: {exc}"]) from None
    echo(f"committed {rel}: {message.splitlines()[0]}")
    try:
        on_branch = deliver(clone, before, sha, op, how, echo)
    finally:
        if old is not None and not target.exists():
            target.write_bytes(old)  # the user's own file, not committed: left as it was
    ids = _op_ids(compiled, project, name)
    for line in plan_lines(compiled, clone, ids, how.status_repo, cache_dir):
        echo(line)
    if not watch:
        return
    if not on_branch:
        echo("not watching: the change is not on the config branch until it is merged")
        return
    source = clone.remote_url() or str(clone.path)
    phase = watch_operation(
        source,
        ids[0],
        STATUS_BRANCH,
        cache_dir,
        generation=generation,
        branch=how.config_branch,
        status_repo=how.status_repo,
    )
    sys.exit(0 if phase == "Succeeded" else 1)


def delivery_options(fn: Callable[..., None]) -> Callable[..., None]:
    for decorator in reversed(
        (
            click.option(
                "--repo",
                default=".",
                show_default=True,
                help="The config repo: a local clone, or a URL (cloned into the cache).",
            ),
            click.option(
                "--branch",
                "branch_name",
                metavar="NAME",
                help="Push to a new branch NAME and print the URL to open a pull request "
                "(the default when the config branch refuses the push).",
            ),
            click.option(
                "--push",
                is_flag=True,
                help="Push to the config branch; a refused push is an error.",
            ),
            click.option(
                "--config-branch",
                default="main",
                show_default=True,
                help="The branch the reconciler reads.",
            ),
            click.option(
                "--watch",
                is_flag=True,
                help="Follow the operation's status until it ends, then print its log's tail.",
            ),
            status_repo_option,
            cache_dir_option,
        )
    ):
        fn = decorator(fn)
    return fn


def _delivery(
    branch_name: str | None, push: bool, config_branch: str, status_repo: str | None = None
) -> Delivery:
    if branch_name and push:
        raise click.UsageError("--branch and --push are exclusive")
    mode = "push" if push else "branch" if branch_name else "auto"
    return Delivery(mode, branch_name, config_branch, status_repo)


def _run(body: Callable[[], None]) -> None:
    try:
        body()
    except SubmitErrors as exc:
        for e in exc.errors:
            click.echo(str(e), err=True)
        raise SystemExit(EXIT_ERROR) from None
    except Refused as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        raise SystemExit(EXIT_ERROR) from None
    except GitSyncError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _project_of(path: Path) -> str | None:
    parts = path.resolve().parts
    for i in range(len(parts) - 2):
        if parts[i] == "projects" and parts[i + 2] == "operations":
            return parts[i + 1]
    return None


@click.command("submit")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--project",
    help="The project to submit to (default: the projects/P/operations/ the FILE is in).",
)
@click.option(
    "-P",
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A value for the file's {{ params.KEY }}, which it fills and nothing more (no keys, "
    "items or maps); every parameter needs one.",
)
@click.option("--queue", help="Set the operation's queue.")
@click.option("--preset", "presets", multiple=True, help="Add a preset (repeatable).")
@delivery_options
def submit(
    file: Path,
    project: str | None,
    params: tuple[str, ...],
    queue: str | None,
    presets: tuple[str, ...],
    repo: str,
    branch_name: str | None,
    push: bool,
    config_branch: str,
    watch: bool,
    status_repo: str | None,
    cache_dir: Path | None,
) -> None:
    """Write the operation in FILE into the config repo (parameters applied), validate
    the whole repo, commit it and push it; then show its plan: queue, cluster, dispatched
    now or position and reason, and when it is estimated to start.

    Without --push or --branch it pushes to the config branch and, when that is refused
    (a protected branch), to a new branch for a pull request."""
    how = _delivery(branch_name, push, config_branch, status_repo)
    named = (("--project", (project,)), ("--queue", (queue,)), ("--preset", presets))
    for hint, values in named:  # each becomes a path in the clone or a YAML scalar in the file
        for value in values:
            problem = None if value is None else name_problem(value, hint.removeprefix("--"))
            if problem is not None:
                raise click.BadParameter(problem, param_hint=hint)

    def body() -> None:
        where = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise Refused([f"{where}:0:0: cannot read: {why}"]) from None
        values: dict[str, str] = {}
        for p in params:
            try:
                key, value = parse_param(p)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="-P") from None
            values[key] = value
        text = apply_params(text, values, where)
        if queue:
            text = set_queue(text, queue)
        if presets:
            text = add_presets(text, presets, where)
        name = operation_name(text, where)
        proj = project or _project_of(file)
        if proj is None:
            raise Refused([f"{where}:1:1: which project? pass --project"])
        problem = name_problem(proj, "project")
        if problem is not None:  # the directory FILE is in
            raise Refused([f"{where}:1:1: {problem}"])
        clone = open_clone(repo, config_branch, cache_dir)
        rel = f"projects/{proj}/operations/{name}.yaml"
        in_place = file.resolve() == (clone.path / rel).resolve()
        _dirty(clone, rel if in_place else None)
        _up_to_date(clone, config_branch)
        if not (clone.path / "projects" / proj / "project.yaml").is_file():
            raise Refused([f"{where}:1:1: project {proj!r} is not in {clone.path}"])
        if clone.tracked(rel) and (clone.path / rel).read_text(encoding="utf-8") != text:
            raise Refused(
                [
                    f"{where}:1:1: {proj}/{name} is already in the config repo ({rel}): "
                    "give it another name, or `reconciler rerun` it"
                ]
            )
        if clone.tracked(rel):
            raise Refused([f"{where}:1:1: {proj}/{name} is already submitted as it is ({rel})"])
        message = f"submit {proj}/{name}"
        details = [f"-P {k}={v}" for k, v in values.items()]
        details += [f"--queue {queue}"] if queue else []
        details += [f"--preset {p}" for p in presets]
        if details:
            message += "\n\n" + " ".join(details)
        generation = _generation(text)
        write_and_commit(
            clone, rel, text.encode(), message, how, f"{proj}/{name}", watch, generation, cache_dir
        )

    _run(body)


def _generation(text: str) -> int:
    m = re.search(r"^generation:\s*(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else 1


def _edit_operation(
    operation: str,
    repo: str,
    how: Delivery,
    watch: bool,
    cache_dir: Path | None,
    edit: Callable[[str, str], tuple[str, int, str]],
) -> None:
    """Edit PROJECT/OP's file in the clone (``edit``: the text and its path to the new
    text, the generation to watch and the commit message), then validate, commit and push
    as submit does."""

    def body() -> None:
        project, sep, name = operation.partition("/")
        if not sep or not project or not name or "/" in name:
            raise click.BadParameter(f"{operation!r}: expected PROJECT/OP", param_hint="OP")
        for value, what in ((project, "project"), (name, "operation")):
            problem = name_problem(value, what)
            if problem is not None:  # it becomes a path in the clone
                raise click.BadParameter(problem, param_hint="OP")
        clone = open_clone(repo, how.config_branch, cache_dir)
        _dirty(clone)
        _up_to_date(clone, how.config_branch)
        rel = f"projects/{project}/operations/{name}.yaml"
        if not clone.tracked(rel):
            raise Refused([f"error: {operation} is not in {clone.path} (no {rel})"])
        text, generation, message = edit((clone.path / rel).read_text(encoding="utf-8"), rel)
        write_and_commit(
            clone, rel, text.encode(), message, how, operation, watch, generation, cache_dir
        )

    _run(body)


@click.command("rerun")
@click.argument("operation", metavar="PROJECT/OP")
@delivery_options
def rerun(
    operation: str,
    repo: str,
    branch_name: str | None,
    push: bool,
    config_branch: str,
    watch: bool,
    status_repo: str | None,
    cache_dir: Path | None,
) -> None:
    """Run PROJECT/OP again: bump its generation (and clear stopped: true), validate,
    commit and push as submit does."""

    def edit(text: str, rel: str) -> tuple[str, int, str]:
        text, generation = bump_generation(set_stopped(text, rel, False), rel)
        return text, generation, f"rerun {operation}: generation {generation}"

    how = _delivery(branch_name, push, config_branch, status_repo)
    _edit_operation(operation, repo, how, watch, cache_dir, edit)


@click.command("stop")
@click.argument("operation", metavar="PROJECT/OP")
@delivery_options
def stop(
    operation: str,
    repo: str,
    branch_name: str | None,
    push: bool,
    config_branch: str,
    watch: bool,
    status_repo: str | None,
    cache_dir: Path | None,
) -> None:
    """Stop PROJECT/OP (a workflow: all its children): set stopped: true, validate,
    commit and push as submit does. Its active run is deleted (StoppedInRepo) whatever
    prune says; rerun runs it again."""

    def edit(text: str, rel: str) -> tuple[str, int, str]:
        stopped = set_stopped(text, rel, True)
        return stopped, _generation(text), f"stop {operation}: stopped: true"

    how = _delivery(branch_name, push, config_branch, status_repo)
    _edit_operation(operation, repo, how, watch, cache_dir, edit)


COMMANDS = (submit, rerun, stop)
