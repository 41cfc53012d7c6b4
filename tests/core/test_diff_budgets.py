"""``plan --base``: a change to a budget (its ``limit``, ``per``, ``resource``), a price (the
org's or a cluster's), or any other setting that moves what runs is in the PR plan: under
the queue's (or the cluster's, or reconciler.yaml's) settings before -> after, with the
operations whose budget check reads differently and the burn it implies."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import pytest
from support.builders import NOW, World

from reconciler.core.plan import PendingReason, plan_repo
from reconciler.core.types import (
    BudgetPeriod,
    BudgetSpec,
    ClusterSpec,
    CohortSpec,
    CompiledRepo,
    OrgSettings,
    QueueFlavor,
    QueueSpec,
    RunKind,
)
from reconciler.core.views.diff import PlanDiff, diff_plans, diff_to_json, diff_to_markdown

GPU = "nvidia.com/gpu"


def budgeted(
    limit: str = "10",
    per: BudgetPeriod = BudgetPeriod.DAY,
    resource: str = "cost",
    org_gpu: str = "2.5",
    cluster_gpu: str | None = None,
) -> World:
    w = World().queue("q", budget=BudgetSpec(Decimal(limit), per, resource))
    w.with_org(prices={GPU: Decimal(org_gpu)}, currency="USD")
    if cluster_gpu is not None:
        w.clusters["local"] = ClusterSpec("local", prices={GPU: Decimal(cluster_gpu)})
    for i in range(4):
        w.op(f"p/o{i}", queue="q", gpu=1).timeout(3600)
    return w


def run(base: World, head: World) -> PlanDiff:
    b, h = base.repo("a" * 40), head.repo("b" * 40)
    observed = list(base.observed.values())
    return diff_plans((b, plan_repo(b, observed, NOW)), (h, plan_repo(h, observed, NOW)))


@pytest.mark.parametrize(
    ("head", "field", "before", "after"),
    [
        (budgeted(limit="12"), "budget.limit", "10", "12"),
        (budgeted(per=BudgetPeriod.WEEK), "budget.per", "day", "week"),
        (budgeted(resource=f"{GPU}-hours"), "budget.resource", "cost", f"{GPU}-hours"),
        (budgeted(org_gpu="3"), f"budget.prices.local.{GPU}", "2.5", "3"),
        (budgeted(cluster_gpu="1"), f"budget.prices.local.{GPU}", "2.5", "1"),
    ],
)
def test_a_budget_or_price_change_is_in_the_pr_plan(
    head: World, field: str, before: str, after: str
) -> None:
    diff = run(budgeted(), head)
    assert diff.has_changes
    (q,) = diff.queues
    assert (field, before, after) in [(f.path, f.before, f.after) for f in q.fields]
    md = diff_to_markdown(diff)
    assert "No change" not in md
    assert f"| q | {field} | `{before}` | `{after}` |" in md
    # the burn it implies: the budget's window, before and after
    (burn,) = diff.budgets
    assert burn.before != burn.after
    assert "### Budgets (the burn this plan implies)" in md
    assert json.loads(diff_to_json(diff))["budgets"][0]["queue"] == "q"


def test_the_operations_whose_budget_check_changes_are_listed() -> None:
    # 5 USD a day at 2.5 an op: 2 dispatch and 2 wait; at 2 USD an op, still 2 wait (2 + 2 +
    # 2 > 5), now with another reservation: their budget check reads differently
    diff = run(budgeted(limit="5"), budgeted(limit="5", org_gpu="2"))
    assert diff.budget_moved, diff
    t = diff.budget_moved[0]
    assert t.reason is PendingReason.BUDGET_EXCEEDED and t.before == "BudgetExceeded"
    assert t.blocked_by is not None and t.blocked_by["reservation"] == "2"
    assert "### Budget check changes" in diff_to_markdown(diff)
    assert json.loads(diff_to_json(diff))["budgetMoved"]


def test_an_unchanged_budget_is_no_change() -> None:
    diff = run(budgeted(), budgeted())
    assert not diff.has_changes


# --- every field that moves a decision is in the diff ------------------------------------

# Fields that move nothing the planner decides, each with why.
NOT_DECISIONS = {
    (QueueSpec, "name"): "the queue's identity (a rename is a removal and an addition)",
    (QueueSpec, "source"): "its file's path",
    (ClusterSpec, "name"): "the cluster's identity",
    (CohortSpec, "name"): "the cohort's identity",
    (CohortSpec, "description"): "words for people",
    (CohortSpec, "source"): "its file's path",
    (ClusterSpec, "kubeconfig"): "how to reach it, not what runs there",
    (ClusterSpec, "context"): "how to reach it, not what runs there",
    (OrgSettings, "status_branch"): "where status is written",
    (OrgSettings, "status_repo"): "where status is written",
    (OrgSettings, "status_keep_days"): "how much of the status branch's history is kept",
    (OrgSettings, "status_max_commits"): "how much of the status branch's history is kept",
    (OrgSettings, "policy"): "shows as the operations it refuses (newlyPolicyViolation)",
    (OrgSettings, "notifications"): "who is told of phase changes, not what dispatches",
    (OrgSettings, "commit_status"): "what the Git host is told of a commit",
    (OrgSettings, "web_url"): "the link in what is sent",
}


def _other(value: Any, name: str) -> Any:
    """A different value of the same type."""
    if isinstance(value, bool):
        return not value
    if name == "flavors":
        return (QueueFlavor("h100", {GPU: Decimal(3)}),)
    if name == "fair_weight":
        return Decimal(3)
    if name == "flavor_prices":
        return {"h100": {GPU: Decimal(3)}}
    if isinstance(value, BudgetSpec):
        return None  # removed; walked field by field below
    if isinstance(value, enum.Enum):
        return next(m for m in type(value) if m is not value)
    if isinstance(value, int | float) or (value is None and name != "cohort"):
        return 7 if value != 7 else 8
    if isinstance(value, str) or name == "cohort":
        return f"{value or ''}x"
    if isinstance(value, frozenset):
        return frozenset({RunKind.JOB})
    if isinstance(value, tuple):
        return ("local", "other")
    if isinstance(value, Mapping):
        if name == "cluster_quota":
            return {"local": {GPU: Decimal(3)}}
        return {GPU: Decimal(3)}
    raise AssertionError(f"no other value for {name}: {value!r}")


def _repo_with(change: Callable[[CompiledRepo], CompiledRepo]) -> tuple[CompiledRepo, CompiledRepo]:
    w = budgeted()
    w.set_queue("q", clusters=("local", "b"))  # a fleet queue: it has every field
    w.cohort("pool", "1h", quota={GPU: 4})
    base = w.repo("a" * 40)
    return base, change(base)


def _diff(base: CompiledRepo, head: CompiledRepo) -> PlanDiff:
    plan = plan_repo(base, [], NOW)
    return diff_plans((base, plan), (head, plan))


def _walk() -> list[tuple[type, str, Callable[[CompiledRepo], CompiledRepo]]]:
    out: list[tuple[type, str, Callable[[CompiledRepo], CompiledRepo]]] = []
    for f in dataclasses.fields(QueueSpec):
        if (QueueSpec, f.name) in NOT_DECISIONS:
            continue

        def queue(repo: CompiledRepo, name: str = f.name) -> CompiledRepo:
            q = repo.queues["q"]
            changed = dataclasses.replace(q, **{name: _other(getattr(q, name), name)})
            return dataclasses.replace(repo, queues={**repo.queues, "q": changed})

        out.append((QueueSpec, f.name, queue))
    for f in dataclasses.fields(BudgetSpec):

        def budget(repo: CompiledRepo, name: str = f.name) -> CompiledRepo:
            q = repo.queues["q"]
            assert q.budget is not None
            value = getattr(q.budget, name)
            other = Decimal(11) if name == "limit" else _other(value, name)
            if name == "resource":
                other = f"{GPU}-hours"
            changed = dataclasses.replace(q, budget=dataclasses.replace(q.budget, **{name: other}))
            return dataclasses.replace(repo, queues={**repo.queues, "q": changed})

        out.append((BudgetSpec, f.name, budget))
    for f in dataclasses.fields(ClusterSpec):
        if (ClusterSpec, f.name) in NOT_DECISIONS:
            continue

        def cluster(repo: CompiledRepo, name: str = f.name) -> CompiledRepo:
            c = repo.clusters["local"]
            changed = dataclasses.replace(c, **{name: _other(getattr(c, name), name)})
            return dataclasses.replace(repo, clusters={**repo.clusters, "local": changed})

        out.append((ClusterSpec, f.name, cluster))
    for f in dataclasses.fields(CohortSpec):
        if (CohortSpec, f.name) in NOT_DECISIONS:
            continue

        def cohort(repo: CompiledRepo, name: str = f.name) -> CompiledRepo:
            c = repo.cohorts["pool"]
            changed = dataclasses.replace(c, **{name: _other(getattr(c, name), name)})
            return dataclasses.replace(repo, cohorts={"pool": changed})

        out.append((CohortSpec, f.name, cohort))
    for f in dataclasses.fields(OrgSettings):
        if (OrgSettings, f.name) in NOT_DECISIONS:
            continue

        def org(repo: CompiledRepo, name: str = f.name) -> CompiledRepo:
            value = getattr(repo.org, name)
            other = "Europe/Berlin" if name == "timezone" else _other(value, name)
            return dataclasses.replace(repo, org=dataclasses.replace(repo.org, **{name: other}))

        out.append((OrgSettings, f.name, org))
    return out


@pytest.mark.parametrize(
    ("model", "name", "change"), _walk(), ids=lambda v: getattr(v, "__name__", v)
)
def test_every_field_that_moves_a_decision_is_in_the_diff(
    model: type, name: str, change: Callable[[CompiledRepo], CompiledRepo]
) -> None:
    base, head = _repo_with(change)
    diff = _diff(base, head)
    listed = [f.path for q in (*diff.queues, *diff.settings) for f in q.fields]
    assert listed, f"{model.__name__}.{name} changed, and the PR plan says nothing"
