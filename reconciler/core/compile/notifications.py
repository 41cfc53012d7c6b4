"""``notifications`` (org, project, operation) and ``commitStatus`` (org): each entry's
secret resolved to the Secret its ``secret`` Connection names.

What must live here: that resolution and what is wrong with it, at its
``file:line:col`` (a missing connection, one of another type, a commit status with no
cluster to read its token from), told to ``report``; without ``report`` a broken entry is
left out (the commit is invalid then anyway: its errors are reported where the file is
checked). The URLs are checked by the schema (``model.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reconciler.core.compile.model import CommitStatus, ConnectionFile, Notification, SecretRef
from reconciler.core.load import Document
from reconciler.core.types import CommitStatusSpec, Location, NotifyRule, SecretKey

# A connection's file by name (None: no such file, or an invalid one).
Lookup = Callable[[str], ConnectionFile | None]
# Where and what is wrong (None: leave it out, say nothing).
Report = Callable[[Location, str], None] | None


def secret_key(
    ref: SecretRef,
    where: Location,
    lookup: Lookup,
    unknown: Callable[[str], str],
    report: Report,
) -> SecretKey | None:
    """The Secret and key ``ref`` reads: its connection must be a ``secret`` one."""
    conn = lookup(ref.connection)
    if conn is None:
        if report is not None:
            report(where, unknown(ref.connection))
        return None
    if conn.secret is None:
        if report is not None:
            report(
                where,
                f"connection {ref.connection!r} is a {conn.type} connection: a webhook "
                "secret or a token is read from a 'secret' connection",
            )
        return None
    return SecretKey(ref.connection, conn.secret.name, ref.key)


def notify_rules(
    doc: Document,
    items: Sequence[Notification] | None,
    lookup: Lookup,
    unknown: Callable[[str], str],
    report: Report = None,
) -> tuple[NotifyRule, ...]:
    """The ``notifications`` of ``doc`` (a top-level list), each secret resolved."""
    rules: list[NotifyRule] = []
    for i, item in enumerate(items or ()):
        hook = item.webhook
        key: SecretKey | None = None
        if hook.secret is not None:
            where = doc.loc(("notifications", i, "webhook", "secret", "connection"))
            key = secret_key(hook.secret, where, lookup, unknown, report)
            if key is None:
                continue
        rules.append(
            NotifyRule(
                on=frozenset(item.on),
                url=hook.url,
                secret=key,
                location=doc.loc(("notifications", i)),
            )
        )
    return tuple(rules)


def commit_status(
    doc: Document,
    spec: CommitStatus | None,
    clusters: Sequence[str],
    lookup: Lookup,
    unknown: Callable[[str], str],
    unknown_cluster: Callable[[str], str],
    report: Report = None,
) -> CommitStatusSpec | None:
    """``commitStatus`` resolved: its token's Secret, and the cluster it is read from (the
    only one when it names none)."""
    if spec is None:
        return None
    where = doc.loc(("commitStatus", "token", "connection"))
    token = secret_key(spec.token, where, lookup, unknown, report)
    cluster = spec.cluster
    if cluster is None:
        if len(clusters) != 1:
            if report is not None:
                report(
                    doc.loc(("commitStatus",)),
                    f"commitStatus: set 'cluster' (the cluster whose Secret holds the token): "
                    f"the repo has {len(clusters)} clusters",
                )
            return None
        cluster = clusters[0]
    elif cluster not in clusters:
        if report is not None:
            report(doc.loc(("commitStatus", "cluster")), unknown_cluster(cluster))
        return None
    if token is None:
        return None
    return CommitStatusSpec(
        provider=spec.provider,
        url=spec.url,
        repository=spec.repository,
        token=token,
        cluster=cluster,
        namespace=spec.namespace,
        context=spec.context,
    )
