"""What ``submit`` and ``rerun`` write into an operation file: parameters filled in, the
queue and presets set, the generation bumped. Pure text in, text out: the file keeps its
comments and layout, and only the lines that change are rewritten. Errors carry the
file's name and the line and column they are about.

What must live here: the text edits of one operation file and their errors. Committing and
pushing them is the CLI's (``cli/submit_cmd.py``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

# A project, operation, queue or preset name: it becomes a path in the repo and a YAML
# scalar in the file, so it is checked before either (``fullmatch``: no final newline).
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
PLACEHOLDER = re.compile(r"\{\{\s*params\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")
_TOP_KEY = r"^{key}:[ \t]*(?P<value>[^\n#]*?)[ \t]*(?:#[^\n]*)?$"


@dataclass(frozen=True)
class SubmitError(Exception):
    """One located problem of a submitted file (``file:line:col: message``)."""

    path: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.message}"


class SubmitErrors(Exception):
    def __init__(self, errors: Sequence[SubmitError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = tuple(errors)


def name_problem(value: str, what: str) -> str | None:
    """Why ``value`` cannot be the name of a ``what`` (a DNS-1123 label), or None."""
    if len(value) <= 63 and _NAME.fullmatch(value):
        return None
    shown = repr(value) if len(value) <= 70 else repr(value[:67]) + "..."
    return (
        f"{what} {shown} is not a valid name: use at most 63 lowercase letters, digits and "
        "'-', starting and ending with a letter or digit (DNS-1123 label)"
    )


def parse_param(text: str) -> tuple[str, str]:
    """``key=value`` of a ``-P``; raises ValueError with the reason."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{text!r}: expected key=value")
    return key, value


def _document(text: str, path: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SubmitErrors([SubmitError(path, line, col, f"YAML: {problem}")]) from None
    if not isinstance(doc, dict):
        raise SubmitErrors([SubmitError(path, 1, 1, "expected an Operation (a mapping)")])
    return doc


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def parameters(text: str, path: str) -> dict[str, tuple[int, int]]:
    """The parameters the file takes: each ``{{ params.NAME }}`` that is not one of its
    matrix's or DAG operations' own params, with where it first appears."""
    doc = _document(text, path)
    own: set[str] = set()
    matrix = doc.get("matrix")
    if isinstance(matrix, dict) and isinstance(matrix.get("params"), dict):
        own.update(str(k) for k in matrix["params"])
    if isinstance(matrix, dict) and isinstance(matrix.get("values"), list):  # kind: mapping
        own.update(str(k) for entry in matrix["values"] if isinstance(entry, dict) for k in entry)
    dag = doc.get("dag")
    if isinstance(dag, dict) and isinstance(dag.get("operations"), list):
        for child in dag["operations"]:
            if isinstance(child, dict) and isinstance(child.get("params"), dict):
                own.update(str(k) for k in child["params"])
    found: dict[str, tuple[int, int]] = {}
    for m in PLACEHOLDER.finditer(text):
        if m.group(1) not in own:
            found.setdefault(m.group(1), _position(text, m.start()))
    return found


def _scalar(value: str) -> str:
    """A ``-P`` value as it is written into the file: as is where the placeholder sits in a
    quoted string or among other text, so the file's own quoting stays in force."""
    return value


def apply_params(text: str, params: Mapping[str, str], path: str) -> str:
    """Fill in ``{{ params.NAME }}``; a ``-P`` the file has no placeholder for, or a
    placeholder left without a value, is an error."""
    known = parameters(text, path)
    errors = [
        SubmitError(
            path,
            1,
            1,
            f"-P {name}: the file has no parameter {name!r} "
            + (f"(its parameters: {', '.join(sorted(known))})" if known else "(it takes none)"),
        )
        for name in params
        if name not in known
    ]
    errors += [
        SubmitError(path, line, col, f"parameter {name!r} has no value: pass -P {name}=VALUE")
        for name, (line, col) in known.items()
        if name not in params
    ]
    if errors:
        raise SubmitErrors(errors)

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        return _scalar(params[name]) if name in params else m.group(0)

    filled = PLACEHOLDER.sub(fill, text)
    _document(filled, path)  # a value that breaks the YAML is an error here, located
    _values_stay_values(text, params, known, path)
    return filled


def _values_stay_values(
    text: str, params: Mapping[str, str], known: Mapping[str, tuple[int, int]], path: str
) -> None:
    """Each value must fill only the scalar its placeholder is in: one that closes a quote
    or a line and writes keys (``1"\npriority: 1000 #``), items or a map would change the
    operation beyond its parameters. Each value is tried alone, the others as plain
    words, against the file with every placeholder a plain word."""
    words = {name: f"reconciler-param-{i}" for i, name in enumerate(sorted(known))}
    skeleton = _document(PLACEHOLDER.sub(functools.partial(_word, words), text), path)
    errors = []
    for name in sorted(params):
        alone = {**words, name: _scalar(params[name])}
        doc = _document(PLACEHOLDER.sub(functools.partial(_word, alone), text), path)
        if not _same_shape(skeleton, doc, words[name]):
            line, col = known[name]
            errors.append(
                SubmitError(
                    path,
                    line,
                    col,
                    f"-P {name}: its value reaches beyond the value it fills (it adds or "
                    "changes keys, items or maps of the file): pass a plain value, or quote "
                    "the placeholder in the file",
                )
            )
    if errors:
        raise SubmitErrors(errors)


def _word(words: Mapping[str, str], m: re.Match[str]) -> str:
    """A placeholder's word; a matrix's or DAG operation's own parameter is kept."""
    return words.get(m.group(1), m.group(0))


def _same_shape(skeleton: Any, doc: Any, word: str) -> bool:
    """``doc`` is ``skeleton`` but for scalars (never keys) that hold ``word``."""
    if isinstance(skeleton, dict):
        return (
            isinstance(doc, dict)
            and list(skeleton) == list(doc)
            and all(_same_shape(v, doc[k], word) for k, v in skeleton.items())
        )
    if isinstance(skeleton, list):
        return (
            isinstance(doc, list)
            and len(skeleton) == len(doc)
            and all(_same_shape(a, b, word) for a, b in zip(skeleton, doc, strict=True))
        )
    if isinstance(skeleton, str) and word in skeleton:
        return not isinstance(doc, dict | list)
    return bool(skeleton == doc)


def _top_key(text: str, key: str) -> re.Match[str] | None:
    return re.search(_TOP_KEY.format(key=re.escape(key)), text, re.MULTILINE)


def _insert_after_name(text: str, line: str) -> str:
    m = re.search(r"^name:[^\n]*\n?", text, re.MULTILINE)
    at = m.end() if m else len(text)
    prefix = text[:at] if text[:at].endswith("\n") or not text[:at] else text[:at] + "\n"
    return prefix + line + "\n" + text[at:]


def _drop_block(text: str, key: str) -> str:
    """Remove a top-level ``key:`` and its indented or ``- `` continuation lines."""
    return re.sub(
        rf"^{re.escape(key)}:[^\n]*\n(?:(?:[ \t]+[^\n]*|-[^\n]*)\n)*", "", text, flags=re.MULTILINE
    )


def set_queue(text: str, queue: str) -> str:
    m = _top_key(text, "queue")
    if m is None:
        return _insert_after_name(text, f"queue: {queue}")
    return text[: m.start("value")] + queue + text[m.end("value") :]


def add_presets(text: str, presets: Sequence[str], path: str) -> str:
    """The operation's presets, then each of ``presets`` not already listed."""
    doc = _document(text, path)
    have = doc.get("presets") or []
    if not isinstance(have, list):
        raise SubmitErrors([SubmitError(path, 1, 1, "presets: expected a list")])
    names = [str(p) for p in have] + [p for p in presets if p not in have]
    return _insert_after_name(_drop_block(text, "presets"), f"presets: [{', '.join(names)}]")


def operation_name(text: str, path: str) -> str:
    name = _document(text, path).get("name")
    if not isinstance(name, str) or not name:
        raise SubmitErrors([SubmitError(path, 1, 1, "name: the operation has no name")])
    problem = name_problem(name, "name: operation")
    if problem is not None:
        m = _top_key(text, "name")
        line, col = _position(text, m.start("value")) if m else (1, 1)
        raise SubmitErrors([SubmitError(path, line, col, problem)])
    return name


def bump_generation(text: str, path: str) -> tuple[str, int]:
    """The file with ``generation`` one more than it was (1 when unset), and the new one."""
    doc = _document(text, path)
    current = doc.get("generation", 1)
    if not isinstance(current, int) or isinstance(current, bool):
        m = _top_key(text, "generation")
        line, col = _position(text, m.start()) if m else (1, 1)
        raise SubmitErrors([SubmitError(path, line, col, "generation: expected an integer")])
    new = current + 1
    m = _top_key(text, "generation")
    if m is None:
        return _insert_after_name(text, f"generation: {new}"), new
    return text[: m.start("value")] + str(new) + text[m.end("value") :], new


def set_stopped(text: str, path: str, stopped: bool) -> str:
    """The file with ``stopped: true`` (or without ``stopped``, when ``stopped`` is False:
    false is the default); an operation stopped twice, or run again while not stopped, is
    refused at its line."""
    doc = _document(text, path)
    current = doc.get("stopped", False)
    m = _top_key(text, "stopped")
    if not isinstance(current, bool):
        line, col = _position(text, m.start()) if m else (1, 1)
        raise SubmitErrors([SubmitError(path, line, col, "stopped: expected true or false")])
    if stopped:
        if current:
            line, col = _position(text, m.start()) if m else (1, 1)
            raise SubmitErrors([SubmitError(path, line, col, "it is stopped already")])
        if m is None:
            return _insert_after_name(text, "stopped: true")
        return text[: m.start("value")] + "true" + text[m.end("value") :]
    return text if m is None else _drop_block(text, "stopped")
