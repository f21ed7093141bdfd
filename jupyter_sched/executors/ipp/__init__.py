"""Tasks on ipyparallel engines: clusters, engines and their probes, dispatch, faults, namespaces.

``on_engine`` and ``namespace`` are also imported on the engines themselves, so this package's
``__init__`` imports nothing.
"""
