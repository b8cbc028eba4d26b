"""Navigation evaluations on the streets world (Vafa et al. 2024, §3.1–3.3, Table 2, App. B).

Three tests of what a route-planning model can *do*, all on top of the LM protocol
(:mod:`interp.models.lm`) and the navigation DFA (:class:`~interp.worlds.streets.StreetsWorld`):

1. **Greedy routes** (§3.1, "capabilities"). Prompt ``origin destination``, then repeatedly take the
   argmax token over the *full* vocabulary until ``end`` or the world's ``max_directions`` cap
   (rows of a batch finish independently; a finished row is no longer extended). A route is
   *valid* if every token is legal in the world and it ends with ``end``, which the world allows
   only at the destination. A valid route is *shortest* if its length (sum of street lengths)
   equals the Dijkstra distance on ``length`` (within a tolerance). The paper's models give
   96–99 % valid routes; 97 % of the shortest-paths model's routes are shortest.

2. **Detours** (§3.3, Table 2). While decoding, with probability ``p`` the model's token is
   replaced by another legal turn: ``random`` (uniform among the other legal turns),
   ``adversarial`` (the legal turn the model ranks lowest) or ``second`` (the second most likely
   legal turn; in the authors' code, not the table). A replacement must keep the destination
   reachable within what is left of the cap (``StreetsWorld.can_reach_within``); when no other
   turn qualifies, no detour happens at that step and the step is counted as *blocked*. As in the
   reference code (``detour_analysis.py``), whatever the model emits is replaced — a direction, an
   ``end`` away from the destination or a node token — at any legal state away from the
   destination (a route already lost, or standing at its destination, is left alone). A true world
   model re-plans from wherever it is put, so its routes stay valid at any ``p``; the paper's
   shortest-path transformers collapse (0.99 → 0.08 at ``p = 0.1``), the random-walk one does not.

3. **Map reconstruction** (App. B). Start from the true map and explain each model-generated
   traversal ``o d d1 .. dk end``: follow streets while the directions fit; where a step has no
   street in its direction, add a new edge in that direction to the nearby node whose
   continuation explains most of the rest (see :func:`reconstruct_map`). Few added edges mean
   the model's routes are consistent with the real map; the paper's models need many, and the
   curved red streets of its Fig. 3 are the implausible ones.

Every test returns a result object with a tidy per-unit DataFrame, a ``summary()`` dict (means
with standard errors over independent routes), ``__str__`` and ``save(folder)``.

The reference navigator is :class:`ShortestPathLM` (``interp navigate --model route-oracle``): a
true world model that puts all its mass on a shortest-route turn and on ``end`` at the
destination, so its greedy routes are valid and shortest and survive any detours. The uniform
oracle :class:`~interp.models.lm.WorldLM` is legal but no navigator: its argmax never says ``end``.

Why greedy routes end: :func:`end_at_destination` measures ``P(end)`` where a route stands at its
destination, beside the ideal predictor of the data (:class:`~interp.models.lm.IdealLM`).

Layout: :mod:`~interp.metrics.navigation.routes` (pairs, decoding, :class:`RouteResult`),
:mod:`~interp.metrics.navigation.detours`, :mod:`~interp.metrics.navigation.ending`, :mod:`~interp.metrics.navigation.reconstruction`,
:mod:`~interp.metrics.navigation.oracle`.
"""

from interp.metrics.navigation.detours import DEFAULT_DETOUR_PROBS, DetourResult, detour_test
from interp.metrics.navigation.ending import end_at_destination
from interp.metrics.navigation.oracle import ShortestPathLM
from interp.metrics.navigation.reconstruction import (
    HALF_MILE_M,
    MapReconstruction,
    parse_traversal,
    reconstruct_map,
)
from interp.metrics.navigation.routes import (
    DETOUR_KINDS,
    RouteResult,
    choose_tokens,
    decode_routes,
    greedy_routes,
    pairs_from_sequences,
    sample_pairs,
    sample_routes,
)

__all__ = [
    "DETOUR_KINDS",
    "DEFAULT_DETOUR_PROBS",
    "HALF_MILE_M",
    "DetourResult",
    "MapReconstruction",
    "RouteResult",
    "ShortestPathLM",
    "choose_tokens",
    "decode_routes",
    "detour_test",
    "end_at_destination",
    "greedy_routes",
    "pairs_from_sequences",
    "parse_traversal",
    "reconstruct_map",
    "sample_pairs",
    "sample_routes",
]
