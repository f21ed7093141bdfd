"""Tasks in kernel threads: running cell code, stopping it, routing its output to its cell."""
