"""One natural-language conversation item: events, who is in it, what is asked, and its gold.

A :class:`Conversation` is the unit that alterations edit and that becomes examples: the events
(:mod:`~interp.worlds.dialogue.tracking`), the cast they may draw on (people with pronouns,
objects, places — substitutions pick from it), the object asked about, the place of the yes/no
question, the template family and the closing's phrasing. Its text comes from
:mod:`~interp.worlds.dialogue.render`; its gold from the world's simulation, never from the text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from interp.worlds.dialogue import render, tracking
from interp.worlds.dialogue.tracking import Event


@dataclass(frozen=True)
class Conversation:
    """A conversation item (module docstring). ``people``: name → pronoun, the speakers first;
    ``objects`` / ``places``: the cast of things (the sampled ones, some maybe unused); ``obj``: the
    object asked about; ``ask_place``: the place of the yes/no question; ``family``: a key of
    :data:`~interp.worlds.dialogue.render.FAMILIES`; ``style``: which closing / question phrasing."""

    events: tuple[Event, ...]
    people: tuple[tuple[str, str], ...]
    objects: tuple[str, ...]
    places: tuple[str, ...]
    obj: str
    ask_place: str
    family: str
    style: int = 0

    def with_(self, **changes) -> Conversation:
        """A copy with fields changed."""
        return replace(self, **changes)

    @property
    def fam(self) -> render.Family:
        """The template family."""
        return render.FAMILIES[self.family]

    def context(self) -> str:
        """The conversation's text, one sentence a line."""
        return render.render_context(self.events, self.fam, dict(self.people))

    def cloze_prompt(self) -> str:
        """The conversation, then the closing cloze (ends right before the answer place)."""
        return self.context() + "\n" + render.closing(self.fam, self.obj, self.style)

    def question(self) -> str:
        """The yes/no question about ``obj`` and ``ask_place``."""
        return render.question(self.fam, self.obj, self.ask_place, self.style)

    def gold_place(self) -> str | None:
        """The cloze gold: where ``obj`` is known to be (None: not known, or in someone's hands)."""
        return tracking.place_of(self.events, self.obj)

    def gold_yes(self) -> bool:
        """The yes/no gold: whether ``obj`` is known to be in ``ask_place``."""
        return tracking.is_at(self.events, self.obj, self.ask_place)

    def mentions(self) -> list[str]:
        """The places the conversation's text names, in order, repeats kept (the closing and the
        question left out)."""
        return render.place_mentions(self.context(), self.places)


__all__ = ["Conversation"]
