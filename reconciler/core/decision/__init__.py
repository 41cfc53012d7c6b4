"""The decision of one cycle (pure): ``decide(compiled, listing, memory, now)`` and the
objects its actions send.

The package, one concern a module (each says what must live in it):

- ``cycle``: ``decide`` in named phases, the memory one cycle hands the next, the actions;
- ``schedule``: cron and interval schedules, and the runs their fire times make (rule 0);
- ``render``: a compiled operation as the Kubernetes objects that dispatch it;
- ``render_kubeflow``: the ``pytorchjob`` backend's ``PyTorchJob``;
- ``trigger``: which watch events start a cycle, and the pace of cycles.
"""
