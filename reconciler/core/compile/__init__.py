"""Compile a repo snapshot into dispatchable operations (pure: snapshot in, values out).

``compile_repo`` validates every file and compiles every operation; ``compile_operation``
parses only what one operation needs. Neither raises on bad input: problems become
``ConfigError`` (the commit is invalid) or ``RejectedOperation`` (that operation may not run).
An unexpected exception is a bug in the compiler, never a config error: it is raised as
``InternalError``, naming the step and the file being compiled.

Per operation (docs/presets.md):

1. start from the operation as written;
2. patch with the project's ``defaults.presets`` then the operation's ``presets``, each with
   its own strategy (project presets shadow org presets of the same name);
3. fill ``queue`` from the project default, then the org default;
4. validate the merged spec; resolve the queue, its cluster and the connections;
5. total the resource requests;
6. check org policy (violations reject the operation, naming field and provenance);
7. expand matrix / DAG workflows into children.

The package, one concern a module (each says what must live in it):

- ``model``: the schema of every kind of file (pydantic);
- ``merge``: the preset merge strategies, with provenance for every leaf;
- ``policy``: org policy, checked on the compiled operation after the merge;
- ``notifications``: ``notifications`` and ``commitStatus``, each secret resolved to its connection;
- ``explain``: per-field provenance of a compiled operation (``compile --explain``);
- ``errors``: the one way every part reports a problem in the config (``Errors``);
- ``index``: the repo index: layout, files loaded once, typed access, the org's settings;
- ``references``: names resolved across files (presets, clusters, queues, connections),
  "did you mean", names that must exist;
- ``resolve``: one spec made dispatchable (queue, connections, requests, policy);
- ``notifications``: ``notifications`` and ``commitStatus``, their secret connections;
- ``workflows``: matrix / DAG expansion and ``{{ params.NAME }}``, each child validated;
- ``names``: ids and workload names unique across the repo, one project per namespace;
- ``pod``: the pod parts a preset may set beyond the main container (volumes, mounts,
  init containers, sidecars), checked on the merged spec;
- ``operations``: one operation's pipeline, steps 1-7, and ``OperationResult``;
- ``cache``: what one compile keeps for the next (``CompileCache``): a commit recompiles
  only the operations whose inputs changed;
- ``api``: ``compile_repo`` and ``compile_operation``, and the ``InternalError`` boundary;
  ``org_settings``: ``reconciler.yaml`` alone.

Only the names below are the package's interface.
"""

from reconciler.core.compile.api import compile_operation, compile_repo, org_settings
from reconciler.core.compile.cache import CompileCache
from reconciler.core.compile.operations import OperationResult
from reconciler.core.compile.workflows import MAX_WORKFLOW_CHILDREN

__all__ = [
    "MAX_WORKFLOW_CHILDREN",
    "CompileCache",
    "OperationResult",
    "compile_operation",
    "compile_repo",
    "org_settings",
]
