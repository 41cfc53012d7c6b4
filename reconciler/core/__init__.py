"""The pure core: no I/O, the clock passed in. One package per stage of a cycle:

- ``compile``: the config repo's files to compiled operations;
- ``observation``: the clusters' workloads and nodes as the decision sees them;
- ``plan``: the dispatch planner, budgets and start-time estimates;
- ``decision``: ``decide``, one cycle's decision, and the objects its actions send;
- ``reporting``: what a cycle records (the report and the status files);
- ``views``: what people read (queue view, pages, plan and PR-plan renderings);
- ``authoring``: what the CLI writes into a config repo (submit, importers).

Beside them, the vocabulary every stage shares: ``types`` (frozen values), ``quantity``
(Kubernetes quantities) and ``gcpause`` (a pause of the cyclic collector).
"""
