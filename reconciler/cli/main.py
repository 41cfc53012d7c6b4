"""The ``reconciler`` command line."""

from __future__ import annotations

import click

from reconciler import __version__
from reconciler.cli.errors import ReconcilerGroup


@click.group(cls=ReconcilerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="reconciler")
def cli() -> None:
    """dispatch reconciler: decide which ML work gets dispatched to Kubernetes clusters."""


def _register() -> None:
    from reconciler.cli import (
        config_cmds,
        demo_cmd,
        devcluster_cmd,
        import_cmd,
        logs_cmd,
        plan_cmd,
        queues_cmd,
        run_cmd,
        serve_cmd,
        status_cmd,
        submit_cmd,
        usage_cmd,
        why_cmd,
    )

    cli.add_command(devcluster_cmd.dev_cluster)
    for command in config_cmds.COMMANDS:
        cli.add_command(command)
    cli.add_command(plan_cmd.plan)
    cli.add_command(run_cmd.run)
    cli.add_command(demo_cmd.demo)
    cli.add_command(status_cmd.status)
    cli.add_command(why_cmd.why)
    for command in submit_cmd.COMMANDS:
        cli.add_command(command)
    cli.add_command(usage_cmd.usage_command)
    cli.add_command(logs_cmd.logs)
    cli.add_command(queues_cmd.queues)
    cli.add_command(serve_cmd.serve)
    cli.add_command(import_cmd.import_group)


_register()


def main() -> None:
    cli()
