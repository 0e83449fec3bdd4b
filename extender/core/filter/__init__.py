"""The filter verb: job-level quota admission, node sorting, and gangs placed whole.

:func:`.verb.filter_pod` is the entry point, for kube-scheduler's ``filter`` call and for
``simulate``.  It uses the placement room (:mod:`extender.core.placement`) and never the
preemption planner: a job the filter cannot place goes to the PostFilter, which plans.
"""
