"""What a cycle records (pure): the decision with what was carried out of it, and the
status branch's files.

The package, one concern a module (each says what must live in it):

- ``report``: ``report(compiled, decision, outcome) -> Report``, the one place where the
  decision and the outcome meet; ``encode`` (a report as status files) and the views read
  from a report;
- ``status``: the status files' records, their rendering, and reading them back;
- ``block_yaml``: the status files' YAML text, written directly;
- ``replay``: a status commit's cycle decided again from the commit alone;
- ``shards``: a shard's status write, its files joined with the other shards';
- ``notify``: the notifications and commit statuses a cycle sends, as values;
- ``wire``: the shapes that cross a file or HTTP boundary, one serializer each.
"""
