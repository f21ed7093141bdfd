"""What frontends show: immutable, bounded snapshots of the core and their renderings.

``snapshot`` takes views of a ``Core``; ``display`` turns them into text, escaped HTML and the
versioned JSON payload (docs/schema.md). Pure functions of their inputs: imports ``core`` and
``model`` only, so handles, magics, widgets and the comm all render the same way.
"""
