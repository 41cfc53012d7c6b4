"""The pure core: no I/O, the clock passed in. One package per stage of a cycle:

- ``compile``: the config repo's files to compiled operations;
- ``observation``: the clusters' workloads and nodes as the decision sees them;
- ``plan``: the dispatch planner, budgets and start-time estimates;
- ``decision``: ``decide``, one cycle's decision, and the objects its actions send;
- ``reporting``: what a cycle records (the report and the status files);
- ``views``: what people read (queue view, pages, plan and PR-plan renderings);
- ``authoring``: what the CLI writes into a config repo (submit, importers).

Beside them, what every stage shares: ``types`` (frozen values), ``load`` (the strict YAML
loader every file anyone reads goes through), ``quantity`` (Kubernetes quantities and
durations) and ``gcpause`` (a pause of the cyclic collector). These import no stage, so a
stage's package never imports another's whole on the way.
"""
