"""Tasks in kernel threads: the thread pool (``executor``), running cell code and callables and
interrupting them (``running``), routing their output to their cell (``output``)."""
