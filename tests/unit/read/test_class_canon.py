"""An access class is its audience: chains of checks that let the same callers through share one
class id, chains that differ for any caller never do (ingestor.read.access_classes.decision_key)."""

from __future__ import annotations

import itertools
import random

from ingestor.read.access_classes import (
    READ,
    SEARCH,
    AccessClass,
    AceStep,
    Identity,
    Rule,
    Step,
    decision_key,
)

UIDS = (0, 1, 2, 3)
GIDS = (10, 11, 12)
#: Every caller the chains below can tell apart: no uid, each named uid, one named by none; every
#: set of the named groups, with and without one named by none.
CALLERS = [
    Identity("probe", u, frozenset(g))
    for u in (None, *UIDS, 77)
    for r in range(len(GIDS) + 2)
    for g in itertools.combinations((*GIDS, 88), r)
]


def _step(rng: random.Random, need: int) -> Step | AceStep:
    uid, gid = rng.choice(UIDS), rng.choice(GIDS)
    if rng.random() < 0.2:
        who = ["EVERYONE@", "AUTH@", "OWNER@", "GROUP@", *(f"u:{u}" for u in UIDS)]
        who += [f"g:{g}" for g in GIDS]
        aces = tuple((rng.random() < 0.7, rng.choice(who)) for _ in range(rng.randint(0, 3)))
        return AceStep(uid, gid, need, aces)
    mode = rng.choice([0o755, 0o750, 0o700, 0o711, 0o644, 0o640, 0o600, 0o604, 0o664, 0o705])
    acl: tuple[tuple[int, int, int], ...] = ()
    if rng.random() < 0.25:
        acl = ((0x02, rng.choice(UIDS), rng.choice((0, 5, 7))), (0x10, 0, rng.choice((5, 7))))
        if rng.random() < 0.5:
            acl += ((0x08, rng.choice(GIDS), rng.choice((0, 5))),)
    return Step(uid, gid, mode, need, acl)


def _chain(rng: random.Random) -> tuple[Step | AceStep | Rule, ...]:
    if rng.random() < 0.1:
        uids = frozenset(rng.sample(UIDS, rng.randint(0, 2)))
        gids = frozenset(rng.sample(GIDS, rng.randint(0, 2)))
        return (Rule(f"p{rng.randint(0, 3)}/", uids, gids, rng.random() < 0.3),)
    folders = [_step(rng, SEARCH) for _ in range(rng.randint(0, 3))]
    return (*folders, _step(rng, READ))


def test_chains_share_a_class_exactly_when_every_caller_gets_the_same_answer() -> None:
    rng = random.Random(53)
    by_audience: dict[tuple[bool, ...], set[str]] = {}
    by_id: dict[str, tuple[bool, ...]] = {}
    for _ in range(3000):
        cls = AccessClass.of(_chain(rng))
        audience = tuple(cls.allows(who) for who in CALLERS)
        assert by_id.setdefault(cls.id, audience) == audience, "one id, two audiences"
        by_audience.setdefault(audience, set()).add(cls.id)
    merged = [ids for ids in by_audience.values() if len(ids) > 1]
    assert merged == [], f"{len(merged)} audiences split over several ids"
    assert 10 < len(by_audience) < 3000  # the fixture makes many chains of few audiences


def test_a_share_of_many_owners_and_modes_has_as_many_classes_as_audiences() -> None:
    """World-readable files of different owners, under folders of different owners and groups,
    are one class; a chmod that changes no reader (a group's write bit) keeps it."""
    world = {
        AccessClass.of((Step(0, 0, 0o755, SEARCH), Step(1, 10, 0o644, READ))).id,
        AccessClass.of((Step(2, 11, 0o755, SEARCH), Step(3, 12, 0o664, READ))).id,
        AccessClass.of((Step(0, 0, 0o755, SEARCH),) * 4 + (Step(2, 2, 0o444, READ),)).id,
        AccessClass.of((Rule("pub/", anyone=True),)).id,
    }
    assert len(world) == 1
    team = AccessClass.of((Step(0, 10, 0o750, SEARCH), Step(1, 10, 0o640, READ)))
    team_rw = AccessClass.of((Step(0, 10, 0o770, SEARCH), Step(1, 10, 0o660, READ)))
    assert team.id == team_rw.id
    assert team.id not in world
    # Mode 044: its owner may not read what everyone else may, so it is not "world".
    odd = AccessClass.of((Step(1, 10, 0o044, READ),))
    assert odd.id not in world
    assert not odd.allows(Identity("owner", 1, frozenset()))
    assert odd.allows(Identity("anyone else", 5))


def test_a_chain_naming_too_many_groups_keeps_a_class_of_its_own() -> None:
    steps = tuple(
        Step(0, 100 + i, 0o750, SEARCH, ((0x08, 200 + i, 5), (0x10, 0, 5))) for i in range(6)
    )
    assert decision_key(steps) is None
    assert AccessClass.of(steps).id == AccessClass.of(steps).id
