"""Importers: other systems' files converted into this repo's kinds (pure).

``reconciler import polyaxon`` and ``reconciler import kueue`` read files, hand them here as
:class:`Source` values with what the destination repo already holds (:class:`Target`), and
write the :class:`ImportResult`'s files, all or none. A field that has no equivalent is a
:class:`Finding` at its ``file:line:col`` (an error under ``--strict``); an input that cannot
be imported at all is a :class:`~reconciler.core.types.ConfigError` and nothing is written.

The package: ``polyaxon`` and ``kueue``, one importer each; here, what they share (the
input and result values, findings, names made valid).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from reconciler.core.load import Document, PathKey, parse_yaml
from reconciler.core.types import ConfigError, Location, printable_text


@dataclass(frozen=True, slots=True)
class Source:
    """One input file: the path it is reported under and its bytes."""

    path: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Target:
    """What the destination repo already has, by name: the importer writes a queue, preset,
    cohort or flavor only when it is missing, and drops (and reports) a reference to a
    connection that does not exist."""

    cluster: str = "local"
    queues: frozenset[str] = frozenset()
    connections: frozenset[str] = frozenset()
    presets: frozenset[str] = frozenset()
    flavors: frozenset[str] = frozenset()
    cohorts: frozenset[str] = frozenset()
    projects: frozenset[str] = frozenset()
    project_namespaces: tuple[tuple[str, str], ...] = ()  # (project, its namespace)
    # The org policy an imported operation must meet (reconciler.yaml `policy:`).
    service_accounts: frozenset[str] = frozenset()
    priority_classes: frozenset[str] = frozenset()
    scheduler_names: frozenset[str] | None = None  # None: any
    host_namespaces: bool = False  # podSecurity privileged
    min_ttl: int = 3600
    # Where an operation of the project may go: the kinds of the repo's queues that limit
    # them, the queues org and project policy allow (None: any), the queue it gets by default.
    queue_kinds: tuple[tuple[str, tuple[str, ...]], ...] = ()
    org_allowed_queues: frozenset[str] | None = None
    project_allowed_queues: frozenset[str] | None = None
    default_queue: str | None = None


@dataclass(frozen=True, order=True, slots=True)
class Finding:
    """A field with no equivalent, at its line, with what to do instead."""

    location: Location
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {printable_text(self.message)}"


@dataclass(frozen=True, slots=True)
class ImportResult:
    """The files to write (repo-relative path, text), in order; what was reported; and the
    errors that stop the import (then ``files`` is empty)."""

    files: tuple[tuple[str, str], ...]
    findings: tuple[Finding, ...]
    errors: tuple[ConfigError, ...]


Resolver = Callable[[str], Source | None]
"""Reads a file another file refers to (a polyaxonfile's ``pathRef``), by its path as the
importer joined it; ``None`` when there is no such file."""

_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def dns_label(name: str, fallback: str = "imported") -> str:
    """``name`` made a DNS-1123 label: lowercase, ``_``, ``.`` and spaces as ``-``."""
    out = _NOT_LABEL.sub("-", name.strip().lower())
    out = re.sub("-{2,}", "-", out).strip("-")[:63].strip("-")
    return out or fallback


class Report:
    """Collects findings and errors against the documents they are in."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.errors: list[ConfigError] = []

    def note(self, doc: Document, path: PathKey, message: str, *, key: bool = True) -> None:
        self.findings.append(Finding(doc.loc(path, key=key), message))

    def error(self, doc: Document, path: PathKey, message: str, *, key: bool = True) -> None:
        self.errors.append(ConfigError(doc.loc(path, key=key), message))


def parse(source: Source, report: Report) -> Document | None:
    """The file as a located document; its YAML errors are import errors."""
    doc, errors = parse_yaml(source.path, source.content)
    report.errors.extend(errors)
    return doc


_DOC_START = re.compile(r"^---(?:[ \t].*)?$")


def parse_all(source: Source, report: Report) -> list[Document]:
    """Every document of a multi-document file (``---`` between them, as ``kubectl`` writes
    manifests), each with the lines of the whole file; empty documents are skipped."""
    try:
        text = source.content.decode("utf-8")
    except UnicodeDecodeError:
        doc = parse(source, report)
        return [doc] if doc is not None else []
    lines = text.splitlines(keepends=True)
    chunks: list[tuple[int, list[str]]] = [(0, [])]
    for number, line in enumerate(lines):
        if _DOC_START.match(line.rstrip("\r\n")):
            chunks.append((number + 1, []))
        else:
            chunks[-1][1].append(line)
    docs: list[Document] = []
    for offset, chunk in chunks:
        body = "".join(chunk)
        if not body.strip() or all(not s.strip() or s.lstrip().startswith("#") for s in chunk):
            continue
        content = ("\n" * offset + body).encode("utf-8")
        doc = parse(Source(source.path, content), report)
        if doc is not None:
            docs.append(doc)
    return docs


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(header: list[str], body: Mapping[str, Any]) -> str:
    """A file: ``# `` comment lines, then the body as block YAML in the given key order."""
    # One comment line each, whatever a file name or a value holds: never a second line.
    lines = [f"# {printable_text(line)}".rstrip() for line in header]
    text = yaml.dump(dict(body), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join([*lines, text.rstrip("\n")]) + "\n"


def value_kind(value: Any) -> str:
    """What a value is, for a message: "a mapping", "a list", else the value (cut short)."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{value!r}"[:40]
