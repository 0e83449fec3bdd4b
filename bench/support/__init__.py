"""What the benchmarks that run Muster for real share: not a benchmark itself.

``bench.e2e`` (kube-scheduler's binding rate with and without Muster, gang preemption),
``bench.time_to_mark``, ``bench.live_list``, ``bench.peers``, ``bench.floor_calls``,
``bench.verb_cpu`` and ``bench.memory`` import from here:

* ``run_notes``: the progress log on stderr, the machine a run was on and the Muster code
  it measured (``muster_tree_state``, or a commit exported with ``export_muster``);
* ``processes``: Muster (``muster serve``, ``muster evictor``) and the no-op extender as
  child processes, and ``MUSTER_COMMAND``;
* ``cluster_setup``: the pods and ElasticQuotas a benchmark creates on the local control
  plane (``localcluster``), their labels, and kube-scheduler's bin-packing profile;
* ``pod_watch``: one watch on the benchmark's pods, recording when each was bound,
  Running, marked for soft eviction and deleted;
* ``meters``: CPU seconds per process and kube-apiserver's request counters over a window;
* ``profiling``: ``py-spy`` attached to a process, and the hottest functions it saw.
* ``weights``: ``bench.peers --weights``, read and written as Koordinator reads them.
"""
