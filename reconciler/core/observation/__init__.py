"""Observation: the clusters as the decision sees them (pure: listings in, values out).

The package, one concern a module (each says what must live in it):

- ``observe``: each operation's observed phase from its workloads and their pods, and the
  fields observation reads of each kind (the watch caches keep only these);
- ``gang``: a distributed operation's pods: which replica each is, how many of a role run;
- ``capacity``: a cluster's free capacity per node shape, for a fleet queue's check 10;
- ``outputs``: a run's named outputs, read from its termination message, bounded;
- ``observed``: the observed-state file of ``reconciler plan --observed FILE``.
"""
