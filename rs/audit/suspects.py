"""The rejected card's suspect references (`templates/card_suspects.md.jinja`), recomputed from the rejected split's rows.

A check of its own (`rs.pipeline.sample.adjudicate`): the count the card states, and the one `stats.json` records, are the
rejected rows whose `reason` is `suspect_reference`.
"""

from __future__ import annotations

import re

from rs.audit.card_text import number
from rs.audit.checkers import Audit, checker

_STATED = re.compile(r"^\*\*Suspect references\.\*\* (\d[\d,]*) of the (\d[\d,]*) rejections", re.M)


@checker("rejected")
def suspect_references(a: Audit) -> None:
    """The card's `N of the M rejections` and `recovery.suspects.marked` against the rejected rows' reasons."""
    recovery = a.report.recovery
    suspects = recovery.suspects if recovery is not None else None
    if suspects is None:
        return
    held = a.facts.rejected_by_reason
    truth = held.get("suspect_reference", 0) if held is not None else None
    body = a.repo.body
    stated = _STATED.search(body)
    where = f"{a.repo.name}/README.md" + (f":{body.count(chr(10), 0, stated.start()) + 1}" if stated else "")
    if stated is None:
        a.fail("the suspect references' sentence", where, "the stats call for it and the card does not state it")
    else:
        a.same("`suspect_reference` rejections", where, number(stated[1]), truth)
        a.same("rejections", where, number(stated[2]), sum(held.values()) if held is not None else None)
    a.same("recovery.suspects.marked (stats)", f"{a.repo.name}/rs/stats.json", suspects["marked"], truth)
