"""The simulator's player builds the events it makes on every batch and run's end without
their interpreted constructors: what it builds is what the constructors make, every field
given."""

from __future__ import annotations

import dataclasses

from jupyter_sched.core import events as ev
from jupyter_sched.sim import play


def _values(event: object) -> list[object]:
    return [getattr(event, f.name) for f in dataclasses.fields(event)]  # type: ignore[arg-type]


def test_the_events_the_player_builds_are_those_their_constructors_make():
    for made, made_by_hand in [
        (play.tick(2.5, "tick-2.5"), ev.Tick(2.5, cause="tick-2.5")),
        (play.finished("t7", 2, "finished-t7-2"), ev.Finished("t7", attempt=2,
                                                              cause="finished-t7-2")),
    ]:
        assert type(made) is type(made_by_hand)
        assert _values(made) == _values(made_by_hand)
        assert repr(made) == repr(made_by_hand) and hash(made) == hash(made_by_hand)
        assert ev.named(made) is made  # (named: played as it is)
