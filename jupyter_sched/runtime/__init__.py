"""The runtime: one thread that owns the core, feeds it events and carries out its instructions.

Holds the ``Scheduler`` configurable (settings and lifecycle), building submissions, and the
handles users wait on. Imports ``executors``, ``host``, ``views``, ``core`` and ``model``;
nothing from ``notebook`` or ``api``.
"""
