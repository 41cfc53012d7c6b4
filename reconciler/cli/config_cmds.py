"""``reconciler validate``, ``reconciler compile`` and ``reconciler schema``.

Exit codes: 0 valid, 1 invalid (or rejected by policy), 2 usage error, 70 internal error.
A problem in the config never prints a traceback; an unexpected exception is a bug in the
reconciler, raised as ``InternalError`` and reported (with its traceback) by
``reconciler.cli.errors``.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click
import yaml

from reconciler.adapters.git import head_signature
from reconciler.adapters.repo import snapshot_worktree
from reconciler.cli.options import cluster_kubeconfig_option, parse_overrides
from reconciler.cli.output import plain_table
from reconciler.core.compile import OperationResult, compile_operation, compile_repo
from reconciler.core.compile.explain import provenance_rows
from reconciler.core.compile.model import json_schemas
from reconciler.core.quantity import format_quantity
from reconciler.core.types import (
    CompiledOperation,
    ConfigError,
    InternalError,
    RejectedOperation,
    RepoSnapshot,
    printable_path,
    printable_text,
)

F = TypeVar("F", bound=Callable[..., Any])
_OP_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

_repo_option = click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Config repo checkout (its working tree is read, committed or not).",
)


def _guard(fn: F) -> F:
    """An unreadable file is one line on stderr and exit 1; any other unexpected exception
    is a bug, raised as ``InternalError`` (exit 70, see ``reconciler.cli.errors``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort, InternalError):
            raise
        except OSError as exc:
            click.echo(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
            sys.exit(1)
        except Exception as exc:
            command = click.get_current_context(silent=True)
            what = command.command_path if command else fn.__name__
            raise InternalError(f"running {what}", exc) from exc

    return cast(F, wrapper)


def _snapshot(repo: Path) -> RepoSnapshot:
    # Working-tree files even inside a Git repo, so changes validate before they are committed.
    return snapshot_worktree(repo)


def _warn_signature(repo: Path, signers: str) -> None:
    """``policy.requireSignedCommits``: a warning when the commit checked out would be
    refused by ``run`` (the working tree's files are what is validated, not a commit)."""
    refusal = head_signature(repo, signers)
    if refusal:
        click.echo(
            f"warning: HEAD: {refusal} (policy.requireSignedCommits: run and serve would "
            "refuse it)",
            err=True,
        )


def _error_json(error: ConfigError) -> dict[str, Any]:
    loc = error.location
    return {"file": loc.file, "line": loc.line, "col": loc.col, "message": error.message}


def _rejected_json(rejected: RejectedOperation) -> dict[str, Any]:
    loc = rejected.location
    return {
        "operation": rejected.operation,
        "reason": str(rejected.reason),
        "message": rejected.message,
        "file": loc.file if loc else rejected.path,
        "line": loc.line if loc else 0,
        "col": loc.col if loc else 0,
    }


def _rejected_text(rejected: RejectedOperation) -> str:
    where = str(rejected.location) if rejected.location else printable_path(rejected.path)
    return printable_text(f"{where}: {rejected.reason}: {rejected.operation}: {rejected.message}")


# --- validate -----------------------------------------------------------------------------


@click.command("validate")
@_repo_option
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    help="text: one line per error; json: valid, errors, rejected, operations, queues, "
    "clusters, warnings.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Also read each cluster's nodes: warn about a flavor whose nodeLabels match no "
    "node of any cluster (a warning: the exit code is the same).",
)
@cluster_kubeconfig_option
@_guard
def validate(repo: Path, output: str, live: bool, cluster_kubeconfigs: tuple[str, ...]) -> None:
    """Validate every file of the config repo and compile every operation.

    Lists every error as file:line:col: message. Exit 0 if valid, 1 if not, 70 on an
    internal error (a bug in the reconciler, not in the config). With
    policy.requireSignedCommits, warns on stderr when HEAD would be refused (not signed by
    an allowed key); the exit code stays that of the files.
    """
    compiled = compile_repo(_snapshot(repo))
    ok = compiled.valid and not compiled.rejected
    warnings: list[str] = []
    if live and compiled.valid:
        from reconciler.runtime.live import connector, flavor_warnings

        warnings = flavor_warnings(compiled, connector(parse_overrides(cluster_kubeconfigs)))
    signers = compiled.org.policy.allowed_signers
    if signers is not None:
        _warn_signature(repo, signers)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "valid": ok,
                    "version": compiled.version,
                    "errors": [_error_json(e) for e in compiled.errors],
                    "rejected": [_rejected_json(r) for r in compiled.rejected],
                    "operations": [op.id for op in (*compiled.operations, *compiled.schedules)],
                    "queues": sorted(compiled.queues),
                    "clusters": sorted(compiled.clusters),
                    **({"warnings": warnings} if live else {}),
                },
                indent=2,
            )
        )
    else:
        for error in compiled.errors:
            click.echo(str(error))
        for rejected in compiled.rejected:
            click.echo(_rejected_text(rejected))
        for warning in warnings:
            click.echo(warning, err=True)
        # a scheduled workflow's children are counted: each of its runs has them
        summary = (
            f"{len(compiled.operations) + len(compiled.schedules)} operations, "
            f"{len(compiled.queues)} queues, {len(compiled.clusters)} clusters"
        )
        if ok:
            click.echo(f"valid: {summary}", err=True)
        else:
            click.echo(
                f"invalid: {len(compiled.errors)} errors, {len(compiled.rejected)} rejected "
                f"operations ({summary})",
                err=True,
            )
    sys.exit(0 if ok else 1)


# --- compile ------------------------------------------------------------------------------


def _operation_json(op: CompiledOperation, explain: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operation": op.id,
        "queue": op.queue,
        "cluster": op.cluster,
        "namespace": op.namespace,
        "kind": str(op.kind),
        "presets": list(op.presets),
        "requests": {k: format_quantity(v) for k, v in sorted(op.requests.items())},
        "connections": list(op.connections),
        "generation": op.generation,
        "isApproved": op.is_approved,
        "replicas": op.replicas,
    }
    if op.distributed is not None:
        out["podRequests"] = {k: format_quantity(v) for k, v in sorted(op.per_pod.items())}
        out["distributed"] = {
            "framework": str(op.distributed.framework),
            "port": op.distributed.port,
            "backend": str(op.distributed.backend),
        }
    if op.workflow is not None:
        out["workflow"] = {
            "parent": op.workflow.parent,
            "kind": op.workflow.kind,
            "index": op.workflow.index,
            "concurrency": op.workflow.concurrency,
        }
        out["dependencies"] = list(op.dependencies)
        out["params"] = dict(op.params)
    out["spec"] = op.spec
    if explain:
        out["provenance"] = {
            k: {"file": p.file, "line": p.line, "step": p.step} for k, p in op.provenance.items()
        }
        if "run.replicas" not in op.provenance:
            out["provenance"]["run.replicas"] = {"step": "default (1)"}
    return out


def _result_json(result: OperationResult, explain: bool) -> dict[str, Any]:
    assert result.compiled is not None
    out = _operation_json(result.compiled, explain)
    spec = result.compiled.spec
    if "matrix" in spec or "dag" in spec:
        kind = "matrix" if "matrix" in spec else "dag"
        children = [
            {
                "operation": child.id,
                "params": dict(child.params),
                "dependencies": list(child.dependencies),
                "requests": {k: format_quantity(v) for k, v in sorted(child.requests.items())},
            }
            for child in result.operations
        ]
        out["workflow"] = {
            "kind": kind,
            "concurrency": spec[kind].get("concurrency"),
            "children": children,
        }
    if result.rejected is not None:
        out["rejected"] = {
            "reason": str(result.rejected.reason),
            "message": result.rejected.message,
        }
    return out


def _table(op: CompiledOperation) -> None:
    """One row per field with its value and where it came from: a rich table on a
    terminal, plain aligned lines (never cut to a width) when piped."""
    from rich.console import Console
    from rich.table import Table

    title = f"{op.id}  queue={op.queue}  cluster={op.cluster}  ns={op.namespace}"
    rows = [(row.field, row.value, f"{row.step}  {row.source}") for row in provenance_rows(op)]
    if "run.replicas" not in op.provenance:
        rows.append(("run.replicas", "1", "default"))
    requests = ", ".join(f"{k}={format_quantity(v)}" for k, v in sorted(op.requests.items()))
    if op.replicas > 1:
        requests += f" ({op.replicas} replicas)"
    caption = f"requests: {requests or 'none'}; presets: {', '.join(op.presets) or 'none'}"
    console = Console()
    if not console.is_terminal:
        for line in [title, *plain_table(("field", "value", "source"), rows), caption]:
            click.echo(line)
        return
    table = Table(title=title, caption=caption)
    for column in ("field", "value", "source"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _emit(obj: Any, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(obj, indent=2, default=str))
    else:
        click.echo(yaml.safe_dump(obj, sort_keys=False, allow_unicode=True), nl=False)


@click.command("compile")
@click.argument("operation")
@_repo_option
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json", "table"]),
    default="yaml",
    help="yaml or json: the compiled operation; table: one row per field with its source.",
)
@click.option("--explain", is_flag=True, help="Add where every field came from.")
@_guard
def compile_cmd(operation: str, repo: Path, output: str, explain: bool) -> None:
    """Show the compiled form of PROJECT/OPERATION (presets, defaults and queue applied)."""
    if not _OP_ID.match(operation):
        raise click.BadParameter("expected PROJECT/OPERATION, e.g. vision/train-resnet")
    snapshot = _snapshot(repo)
    result = compile_operation(snapshot, operation)
    if result.errors:
        for error in result.errors:
            click.echo(str(error), err=True)
        sys.exit(1)
    compiled = result.compiled
    obj: dict[str, Any] | None = None
    if not result.found:
        # A workflow child ("sweep-3") has no file of its own.
        whole = compile_repo(snapshot)
        child = next((op for op in whole.operations if op.id == operation), None)
        if child is None:
            project, _, name = operation.partition("/")
            click.echo(
                f"error: no operation {operation!r} (no projects/{project}/operations/{name}.yaml)",
                err=True,
            )
            sys.exit(1)
        compiled, obj = child, _operation_json(child, explain)
    if compiled is None:  # pragma: no cover - errors are reported above
        sys.exit(1)
    if output == "table":
        _table(compiled)
    else:
        _emit(obj if obj is not None else _result_json(result, explain), output)
    if result.rejected is not None:
        click.echo(_rejected_text(result.rejected), err=True)
        sys.exit(1)


# --- schema -------------------------------------------------------------------------------


@click.command("schema")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write <kind>.schema.json files into this directory (else print one JSON object).",
)
@_guard
def schema(out: Path | None) -> None:
    """JSON Schema for every kind of config file (for editors and CI)."""
    schemas = json_schemas()
    if out is None:
        click.echo(json.dumps(schemas, indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for kind, body in schemas.items():
        path = out / f"{kind.lower()}.schema.json"
        path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        click.echo(str(path))


COMMANDS = (validate, compile_cmd, schema)
