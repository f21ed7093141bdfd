"""An IPython startup file for the example notebooks' kernels under nbval
(tests/test_notebooks.py): the kernel sees a host unlike any real one, with 3 CPUs and
5.5 GiB of memory. A notebook whose saved outputs show what the host has (its CPUs, its
memory), instead of what the notebook declares, then fails here as it would on any other
machine.

(Engines started from the notebooks run IPython's startup files too, and some clear their
namespace: the replacements keep what they use in a closure, not in the namespace.)
"""


def _unlike_any_host():
    import os

    import psutil

    odd_cpus, odd_memory = {0, 1, 2}, 5632 * 1024 * 1024  # 5.5 GiB
    real_affinity, real_memory = getattr(os, "sched_getaffinity", None), psutil.virtual_memory

    def affinity(pid):
        return set(odd_cpus) if pid in (0, os.getpid()) else real_affinity(pid)

    def virtual_memory():
        real = real_memory()
        return real._replace(total=odd_memory, available=min(real.available, odd_memory))

    if real_affinity is not None:
        os.sched_getaffinity = affinity
    psutil.virtual_memory = virtual_memory


_unlike_any_host()
del _unlike_any_host
