"""The runtime: one thread that owns the core, feeds it events and carries out its instructions.

``scheduler`` holds the ``Scheduler`` configurable (settings, life cycle, public methods),
``loop`` its runtime thread, ``submission`` the checks and builders of a submission, ``handles``
the handles users wait on, ``instance`` the kernel-wide scheduler. Imports ``executors``,
``host``, ``views``, ``core`` and ``model``; nothing from ``notebook`` or ``api``.
"""
