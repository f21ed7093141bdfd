"""The ``%sched NAME`` commands."""
