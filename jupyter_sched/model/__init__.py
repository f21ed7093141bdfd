"""The model: quantities, resources, devices, one node's accounting, the cluster, tasks, queues.

Pure data and arithmetic, with no threads, I/O, clock or Jupyter. Imports the standard library
and other ``model`` modules only; everything else in the package builds on it.
"""
