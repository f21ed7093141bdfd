"""This host as a process on it sees it: CPUs, memory, NVML GPUs, declared resources, live GPU use.

Reads the machine (psutil, NVML through ``host.nvml`` alone) and turns it into ``model`` values.
Imports ``model`` and the standard library; no Jupyter package (IPython, ipykernel, ipywidgets,
ipyparallel, traitlets), so engines and the command line can use it as they are.
"""
