"""jupyter_sched: schedule notebook cells on GPUs and ipyparallel engines.

Cells declare what they need (CPUs, GPU fractions or GPU memory, custom resources); a pure
scheduling core decides where they run, with fractional GPU sharing, all-or-nothing gangs and
fair queues. Importing this package needs no GPU and prints nothing.
"""

__version__ = "0.1.0"
