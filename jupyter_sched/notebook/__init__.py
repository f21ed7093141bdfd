"""The notebook face: magics, cell options, the live status line, widgets, the extension hooks.

Reads snapshots and sends requests to the runtime; holds no scheduling logic. May import every
layer below it (``runtime`` and down); only ``api`` and the package root import it.
"""
