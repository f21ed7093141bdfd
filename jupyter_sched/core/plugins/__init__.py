"""Plugins: the policies the actions consult (node order, predicates, gangs, proportion)."""
