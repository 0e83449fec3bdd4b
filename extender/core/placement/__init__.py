"""Where pods fit: node constraints, pod shapes, a job's demand, placement on node copies,
and the packing score.

The room below both the filter (:mod:`extender.core.filter`) and the preemption planner
(:mod:`extender.core.preemption`): each places a job with the same :class:`.fit.JobFit`,
the filter with no victims, the planner as victims come and go.
"""
