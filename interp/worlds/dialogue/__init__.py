"""A synthetic dialogue world with exact answers (PragWorld, AAAI 2026, made checkable).

Seeded conversations between two speakers about agents placing quantities of objects at
locations, with negation, quantifiers (all / some, "some" implying "not all"), connectives (and /
exclusive or) and a ground-truth state each utterance updates; template questions with gold
answers from that state; deterministic versions of PragWorld's seven alterations, each with its
recomputed gold and hence an exact flip / invariant label; export in the benchmark's CSV layout
and as token sequences. The world is a DFA (:class:`DialogueWorld`), so every metric of
:mod:`interp.metrics` applies to it.

Modules, one job each: ``state`` (facts and their semantics), ``grammar`` (words and structured
utterances), ``questions`` (templates, gold answers), ``world`` (the DFA), ``sampling`` (drawing
conversations forwards and backwards), ``alterations`` (the seven alterations), ``export`` (CSV and
token files). A model's QA accuracy on them is a metric: :mod:`interp.metrics.dialogue_qa`.

Natural English (``interp data dialogue``): ``tracking`` (where objects are after put / move /
take / hand-over events, simulated), ``render`` (template families and word lists, train and
heldout), ``conversation`` (one item and its gold), ``tracking_alter`` (the seven alterations on
events, and a paraphrase), ``natural`` (sampling, cloze and yes/no contrast examples). Shortcut
baselines: :mod:`interp.metrics.dialogue_heuristics`.
"""

from interp.worlds.dialogue.grammar import Item, Question
from interp.worlds.dialogue.world import DialogueWorld

__all__ = ["DialogueWorld", "Item", "Question"]
