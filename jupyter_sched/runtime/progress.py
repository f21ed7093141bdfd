"""A ``map``'s progress bar: items ended of all, with ``tqdm.auto`` (a widget in a notebook,
text on stderr elsewhere).

Items end on the scheduler's thread (and on callers' threads when cancelled): the count is
taken under a lock, and the bar closes when the last item ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any


def make_bar(total: int, name: str) -> Any:
    """The bar itself (tests put a fake one here): ``tqdm.auto``'s in a kernel, text
    elsewhere (``tqdm.auto`` takes any process that imported ipykernel's shell, as
    ipyparallel does, for a notebook)."""
    ipython = sys.modules.get("IPython")  # (a kernel has imported it)
    if getattr(ipython and ipython.get_ipython(), "kernel", None) is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(total=total, desc=name or "map", unit="item")


class Progress:
    """Counts ended items on a bar made by :func:`make_bar`."""

    def __init__(self, total: int, name: str) -> None:
        self.total = total
        self.count = 0
        self._lock = threading.Lock()
        self.bar = make_bar(total, name)

    def add(self, n: int = 1) -> None:
        if n <= 0:
            return
        with self._lock:
            if self.count >= self.total:
                return
            n = min(n, self.total - self.count)
            self.count += n
            self.bar.update(n)
            if self.count == self.total:
                self.bar.close()

    def follow(self, futures: Iterable[Future]) -> None:
        """Count each of these as it ends (for tasks, which end one by one)."""
        for future in futures:
            future.add_done_callback(self._one)

    def _one(self, _future: Future) -> None:
        self.add(1)


__all__ = ["Progress", "make_bar"]
