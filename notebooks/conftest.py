"""nbval settings for the example notebooks.

The ``application/vnd.jupyter-sched.v1+json`` payload holds clock readings and the host's name,
so it differs from run to run by design; the ``text/plain`` and ``text/html`` beside it show the
same state and are compared (with the masks in nbval_sanitize.cfg).
"""

MIME = "application/vnd.jupyter-sched.v1+json"


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        notebook = getattr(item, "parent", None)
        skip = getattr(notebook, "skip_compare", None)
        if isinstance(skip, tuple) and MIME not in skip:
            notebook.skip_compare = (*skip, MIME)
