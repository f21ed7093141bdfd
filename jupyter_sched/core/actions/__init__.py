"""Actions, run in this order each cycle: enqueue, allocate, backfill, preempt."""
