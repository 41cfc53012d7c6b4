"""Hypothesis over the hostile input classes of issue 13 section 5, at their largest sizes,
through every reader: the config compiler, ``--observed`` and the status branch. Run as a
child process by ``test_fuzz.py::test_hostile_classes_stay_within_the_memory_budget``,
which measures its peak RSS (``peak_rss.py``); each example must also end in a located
error (or a result), never an exception."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.adapters.repo import snapshot_worktree
from reconciler.core.compile import compile_operation, compile_repo
from reconciler.core.load import MAX_EXPANDED_CHARS, parse_yaml
from reconciler.core.observation.observed import ObservedFileError, parse_observed
from reconciler.core.reporting.status import operation_path, read_status
from reconciler.core.types import RepoFile
from support.hostile import billion_laughs, deep_nesting, matrix_bomb
from support.paths import TEMPLATE as TEMPLATE_DIR

TEMPLATE = snapshot_worktree(TEMPLATE_DIR)
OP = "projects/vision/operations/fuzz.yaml"
EXAMPLES = settings(
    max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def _with(path: str, content: bytes):  # type: ignore[no-untyped-def]
    return replace(TEMPLATE, files={**TEMPLATE.files, path: RepoFile(path, content)})


def _every_reader(content: bytes) -> list[str]:
    """The messages of every reader for ``content``, as config, observed and status file."""
    messages = [str(e) for e in compile_repo(_with(OP, content)).errors]
    try:
        parse_observed(content, "observed.yaml")
    except ObservedFileError as exc:
        messages += [str(e) for e in exc.errors]
    messages += read_status({operation_path("vision/fuzz"): content}).problems
    return messages


@EXAMPLES
@given(
    st.integers(1, 250_000),
    st.integers(1, 4000),
    st.sampled_from(["flow", "block", "key"]),
)
def aliased_long_strings(length: int, refs: int, shape: str) -> None:
    head = f'x: &s "{"A" * length}"\n'
    if shape == "flow":
        body = "y: [" + ", ".join(["*s"] * refs) + "]\n"
    elif shape == "block":
        body = "y:\n" + "".join("  - *s\n" for _ in range(refs))
    else:
        body = "y:\n" + "".join(f"  - {{*s : {i}}}\n" for i in range(refs))
    content = (head + body).encode()
    doc, errors = parse_yaml("f.yaml", content)
    if length * (refs + 1) > MAX_EXPANDED_CHARS:
        assert doc is None and "alias bomb" in errors[0].message, errors
    for message in _every_reader(content):
        assert "\n" not in message and len(message) < 400, message


@EXAMPLES
@given(st.integers(1, 9), st.integers(2, 12), st.sampled_from(["children", "message", "y"]))
def aliased_structures(levels: int, fan_out: int, key: str) -> None:
    content = "operation: vision/fuzz\nphase: Running\n" + billion_laughs(levels, fan_out, key)
    for message in _every_reader(content.encode()):
        assert "\n" not in message, message


@EXAMPLES
@given(st.integers(1, 400), st.integers(1, 3000), st.integers(1, 2000))
def matrix_substitution(children: int, refs: int, length: int) -> None:
    result = compile_operation(_with(OP, matrix_bomb(children, refs, length)), "vision/fuzz")
    total = children * refs * length
    if total > 8 << 20:
        assert any("parameter substitution" in e.message for e in result.errors), result.errors
    for error in result.errors:
        assert "internal error" not in error.message


@EXAMPLES
@given(
    st.integers(1, 20_000),
    st.sampled_from(["[", "{a: "]),
    st.integers(1, 6000),
    st.sampled_from(["!!python/object:os.system", "!local", "!!binary", "!!timestamp", ""]),
)
def nesting_numbers_and_tags(depth: int, opener: str, digits: int, tag: str) -> None:
    content = (
        f"operation: vision/fuzz\nphase: {tag} Running\ngeneration: {'7' * digits}\n"
        f"outputs: {deep_nesting(depth, opener)}\n"
    ).encode()
    messages = _every_reader(content)
    assert messages
    for message in messages:
        assert "\n" not in message and len(message) < 400, message


if __name__ == "__main__":
    for check in (aliased_long_strings, aliased_structures, matrix_substitution):
        check()
    nesting_numbers_and_tags()
    print("ok")
