"""When random knob draws find only already-seen variants: the nearest unseen knob variant.

A knob slot whose ``KNOB_ATTEMPTS`` random draws yield no unseen variant takes the nearest
unseen knob variant (operator ``knob_explore``) of its parent, else of the island's members
(best first), else of the other islands' members.  The search examines at most
``KNOB_EXPLORE_LIMIT`` variants in all; a knob space found fully seen is remembered (and
charged as if examined, so remembering never changes which child is found).  When every
member's space is proven fully seen and no LLM operator can write a new kernel, the explorer
is ``exhausted``: the loop stops breeding and ends the run.
"""
from __future__ import annotations

import random
from typing import Callable, Sequence

from ..knobs import ENUMERATION_LIMIT, KnobSpace
from ..operators import KNOB_EXPLORE, Offspring, Outcome, Rejected, nearest_unseen_variant
from .population import Individual
from .selection import best

KNOB_EXPLORE_LIMIT = ENUMERATION_LIMIT   # knob variants examined per search, all members together

Seen = Callable[[str], bool]


class KnobExplorer:
    """Finds unseen knob variants near population members; proves when none is left."""

    def __init__(self, task_name: str, llm_can_write: bool) -> None:
        self.task_name = task_name
        self.llm_can_write = llm_can_write          # an enabled LLM operator: never exhausted
        self.exhausted = False
        self._exhausted_spaces: dict[str, int] = {}      # knob space key -> its variants, all seen
        self._space_keys: dict[str, str] = {}            # member id -> knob space key
        self._variant_ids: dict[str, dict[tuple[str, ...], str]] = {}   # space -> assignment -> id

    def explore(self, island_index: int, first: Sequence[Individual], islands: Sequence[Sequence[Individual]],
                seen: Seen, rng: random.Random) -> Outcome | None:
        """The nearest unseen variant of ``first``, else of the island's members best first, else
        of the other islands'; None when there is none, or a rejection (and ``exhausted``) when
        provably none is left and no LLM operator is enabled.  Draws one number from ``rng``."""
        order = list(first)
        for step in range(len(islands)):
            island = islands[(island_index + step) % len(islands)]
            order += best(island, len(island))
        salt = rng.getrandbits(64)          # one draw, whatever the search below examines
        child, proven = self.nearest_unseen(order, seen, salt)
        if child is not None:
            return child
        if proven and not self.llm_can_write:
            self.exhausted = True
            return Rejected(KNOB_EXPLORE, tuple(p.id for p in first),
                            "every knob variant of every population member is already seen")
        return None

    def check(self, members: Sequence[Individual], seen: Seen) -> bool:
        """``exhausted``, checked now if not yet known (uses no randomness: a resumed
        generational run still reproduces the next generation)."""
        if not self.exhausted and not self.llm_can_write:
            child, proven = self.nearest_unseen(members, seen, 0)
            self.exhausted = child is None and proven
        return self.exhausted

    def nearest_unseen(self, members: Sequence[Individual], seen: Seen,
                       salt: int) -> tuple[Offspring | None, bool]:
        """The first members' nearest unseen knob variant, and whether the search proved that
        none is left (every member's knob space enumerated, nothing unseen).  Each space's ties
        are broken by its own RNG (salt and member id)."""
        budget, proven = KNOB_EXPLORE_LIMIT, True
        tried: set[str] = set()
        for member in members:
            space = self._space_key(member)
            if space in tried:
                continue
            tried.add(space)
            if space in self._exhausted_spaces:
                budget -= self._exhausted_spaces[space]
                continue
            if budget <= 0:
                return None, False
            found = nearest_unseen_variant(member.source, seen, random.Random(f"{salt}:{member.id}"), budget,
                                           ids=self._variant_ids.setdefault(space, {}))
            budget -= found.examined
            if found.source is not None:
                return Offspring(found.source, KNOB_EXPLORE, (member.id,)), False
            if found.exhausted:
                self._exhausted_spaces[space] = found.examined
            else:
                proven = False
        return None, proven

    def _space_key(self, member: Individual) -> str:
        key = self._space_keys.get(member.id)
        if key is None:
            key = self._space_keys[member.id] = KnobSpace.of(member.source).key()
        return key
