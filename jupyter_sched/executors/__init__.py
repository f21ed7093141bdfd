"""Executors: carry out the core's instructions (local kernel threads, ipyparallel engines)."""
