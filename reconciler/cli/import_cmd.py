"""``reconciler import polyaxon`` and ``reconciler import kueue``: other systems' files
converted into this repo's kinds.

The conversion is pure (``reconciler.core.authoring.importers``); here the input files are
read, what the destination repo already holds is listed, and the result is written all or
nothing: the files go into a temporary directory beside ``--out`` first, then are renamed
into place. Exit 0 when written, 1 on an error (or, with ``--strict``, on any field without
an equivalent), 2 on usage errors.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from reconciler.cli.config_cmds import _guard
from reconciler.core.authoring.importers import ImportResult, Source, Target
from reconciler.core.authoring.importers.kueue import import_kueue
from reconciler.core.authoring.importers.polyaxon import import_polyaxon
from reconciler.core.load import MAX_FILE_BYTES, parse_yaml
from reconciler.core.quantity import duration_seconds
from reconciler.core.types import printable_path

_paths = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
_out = click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The config repo to write into (created if missing). Only new files are written: an "
    "existing file of the same path is an error, and then nothing is written.",
)


def _cluster_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """The name written into every queue the import creates: a DNS-1123 label, as a
    Cluster file's name is (a line break in it wrote a YAML block, not a name)."""
    from reconciler.core.authoring.importers import dns_label

    if dns_label(value) != value:
        raise click.BadParameter(f"{value!r} is not a DNS-1123 label (try {dns_label(value)!r})")
    return value


_cluster = click.option(
    "--cluster",
    callback=_cluster_name,
    default="local",
    show_default=True,
    help="The cluster of every queue the import creates (clusters/NAME.yaml must exist in the "
    "repo for it to validate).",
)
_strict = click.option(
    "--strict",
    is_flag=True,
    help="Treat every field without an equivalent as an error: report them all and write nothing.",
)


def _read(path: Path) -> Source:
    with path.open("rb") as handle:
        return Source(str(path), handle.read(MAX_FILE_BYTES + 1))


def _resolve(path: str) -> Source | None:
    candidate = Path(path)
    return _read(candidate) if candidate.is_file() else None


def _stems(directory: Path) -> frozenset[str]:
    if not directory.is_dir():
        return frozenset()
    return frozenset(
        p.stem for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
    )


def _target(out: Path, cluster: str, project: str | None = None) -> Target:
    """What ``out`` already holds, by name."""
    presets = set(_stems(out / "presets"))
    if project:
        presets |= _stems(out / "projects" / project / "presets")
    projects: dict[str, str] = {}
    mine: dict[str, Any] = {}
    if (out / "projects").is_dir():
        for entry in sorted((out / "projects").iterdir()):
            for name in ("project.yaml", "project.yml"):
                data = _data(entry / name)
                if data is not None:
                    projects[entry.name] = str(data.get("namespace") or entry.name)
                    if entry.name == project:
                        mine = data
    org = _data(out / "reconciler.yaml") or _data(out / "reconciler.yml") or {}
    policy = _map(org.get("policy"))
    kinds: list[tuple[str, tuple[str, ...]]] = []
    for queue in sorted(_stems(out / "queues")):
        for ext in (".yaml", ".yml"):
            data = _data(out / "queues" / f"{queue}{ext}")
            if data is not None and isinstance(data.get("kinds"), list):
                kinds.append((queue, tuple(map(str, data["kinds"]))))
    org_queues, project_queues = policy.get("allowedQueues"), mine.get("allowedQueues")
    default = _map(mine.get("defaults")).get("queue") or _map(org.get("defaults")).get("queue")
    schedulers = policy.get("allowedSchedulerNames")
    try:
        min_ttl = duration_seconds(policy.get("minTtl", "1h"))
    except (AssertionError, TypeError):
        min_ttl = 3600
    return Target(
        cluster=cluster,
        queues=_stems(out / "queues"),
        connections=_stems(out / "connections"),
        presets=frozenset(presets),
        flavors=_stems(out / "flavors"),
        cohorts=_stems(out / "cohorts"),
        projects=frozenset(projects),
        project_namespaces=tuple(sorted(projects.items())),
        service_accounts=frozenset(map(str, policy.get("allowedServiceAccounts") or [])),
        priority_classes=frozenset(map(str, policy.get("allowedPriorityClasses") or [])),
        scheduler_names=None if schedulers is None else frozenset(map(str, schedulers)),
        host_namespaces=policy.get("podSecurity") == "privileged",
        min_ttl=min_ttl,
        queue_kinds=tuple(kinds),
        org_allowed_queues=_names(org_queues),
        project_allowed_queues=_names(project_queues),
        default_queue=str(default) if default else None,
    )


def _data(path: Path) -> dict[str, Any] | None:
    """A YAML file of the repo as a mapping; ``None`` when missing or unreadable (the
    import does not judge the repo: ``reconciler validate`` does)."""
    if not path.is_file():
        return None
    doc, _ = parse_yaml(path.name, path.read_bytes())
    return doc.data if doc is not None and isinstance(doc.data, dict) else None


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _names(value: Any) -> frozenset[str] | None:
    return frozenset(map(str, value)) if isinstance(value, list) else None


def write_all(out: Path, files: Sequence[tuple[str, str]]) -> None:
    """Write every file under ``out``, or none: staged in a temporary directory beside it,
    then renamed into place (the whole directory when ``out`` is new)."""
    existing = [path for path, _ in files if (out / path).exists()]
    if existing:
        raise click.ClickException(
            f"{printable_path(str(out / existing[0]))} exists: the import writes only new "
            "files; remove it or import into another --out (nothing was written)"
        )
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.absolute().name}.import-", dir=parent))
    moved: list[Path] = []
    created: list[Path] = []
    try:
        for path, text in files:
            dest = stage / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        if not out.exists():
            os.rename(stage, out)
            return
        try:
            for path, _ in files:
                dest = out / path
                for folder in reversed(dest.parents):
                    if not folder.exists():
                        folder.mkdir()
                        created.append(folder)
                os.rename(stage / path, dest)
                moved.append(dest)
        except OSError:
            for dest in reversed(moved):
                dest.unlink(missing_ok=True)
            for folder in reversed(created):
                folder.rmdir()
            raise
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def _finish(result: ImportResult, out: Path, strict: bool, what: str) -> None:
    for error in result.errors:
        click.echo(str(error), err=True)
    for finding in result.findings:
        click.echo(str(finding), err=True)
    if result.errors or (strict and result.findings):
        reasons = f"{len(result.errors)} errors"
        if strict:
            reasons += f", {len(result.findings)} fields without an equivalent (--strict)"
        click.echo(f"import {what}: {reasons}; nothing was written", err=True)
        sys.exit(1)
    write_all(out, result.files)
    for path, _ in result.files:
        click.echo(printable_path(str(out / path)))
    click.echo(
        f"import {what}: wrote {len(result.files)} files; {len(result.findings)} fields "
        "without an equivalent reported above (--strict makes them errors)",
        err=True,
    )


@click.group("import")
def import_group() -> None:
    """Convert another system's files into this repo's kinds."""


@import_group.command("polyaxon")
@_paths
@click.option("--project", required=True, help="The project the operations go into.")
@_out
@_cluster
@_strict
@_guard
def polyaxon(paths: tuple[Path, ...], project: str, out: Path, cluster: str, strict: bool) -> None:
    """Convert polyaxonfiles (v1.1) into operations, presets and queues.

    Operations go to projects/PROJECT/operations/, presets (isPreset: true) to presets/,
    and each queue they name that the repo lacks to queues/ (set its quota). Every field
    without an equivalent is reported as file:line:col: message.
    """
    from reconciler.core.authoring.importers import dns_label

    if dns_label(project) != project:
        raise click.BadParameter(
            f"{project!r} is not a DNS-1123 label (try {dns_label(project)!r})",
            param_hint="--project",
        )
    result = import_polyaxon(
        [_read(p) for p in paths],
        project=project,
        target=_target(out, cluster, project),
        resolve=_resolve,
    )
    _finish(result, out, strict, "polyaxon")


@import_group.command("kueue")
@_paths
@_out
@_cluster
@_strict
@_guard
def kueue(paths: tuple[Path, ...], out: Path, cluster: str, strict: bool) -> None:
    """Convert Kueue manifests (v1beta1, v1beta2) into queues, flavors and cohorts.

    ClusterQueues become queues/, ResourceFlavors flavors/, cohorts cohorts/; a LocalQueue
    becomes its namespace's project's allowedQueues and default queue. What has no
    equivalent (preemption, admission checks, ...) is reported as file:line:col: message.
    """
    result = import_kueue([_read(p) for p in paths], target=_target(out, cluster))
    _finish(result, out, strict, "kueue")
