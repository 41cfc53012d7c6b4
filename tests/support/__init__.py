"""What tests share: builders, fakes, clocks, Git, clusters and processes. Test modules import
from here, never from one another.

- ``paths``: the checkout, the example config repo, the test data;
- ``snapshots``: config repos in memory (``overlay``, ``repo``);
- ``builders``: the ``World`` builder of planner inputs;
- ``worlds``: compiled worlds several tests share;
- ``clocks``: clocks a test moves by hand; ``leases``: Leases in memory;
- ``git_commands``: Git with a fixed identity; ``git_daemon``: a Git remote on 127.0.0.1;
- ``status_branch``: a status branch to read, and the CLI in-process;
- ``fake_kube``: the fake ``Kube`` of the fast cycle tests; ``harness``: a Reconciler over it;
  ``histories``: a history of runs the real cycle makes over it (the what-if replay's);
- ``kube_objects``: API objects as the API server returns them; ``apiserver``: a scripted
  HTTP/1.1 server in its place;
- ``escapes``: the pod-field escapes a preset could try, for the policy tests;
- ``watch_replay``: recorded watch events replayed into caches;
- ``strategies``: hypothesis strategies of the property tests; ``scenarios``: random worlds
  through the fake-cluster cycle;
- ``hostile``: hostile inputs; ``fuzz_hostile_child``: their fuzz, run as a child process;
- ``helpers``: waiting, and a child's peak RSS (``peak_rss``);
- ``cluster``: the cluster a "cluster" test runs on; ``reconciler_env``: the config repo and
  Reconcilers on it; ``processes``: ``reconciler run`` processes; ``zygote``: started fast;
  ``fault_loop``: the kill -9 loop of R1; ``shard_replicas``: ``run --shards`` processes killed
  and started again; ``tcp_proxy``: a partition on demand;
- ``kubeflow_crd`` and ``kubeflow_operator``: the optional Training Operator peer.
"""
