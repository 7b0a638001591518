"""`rs plan` suggests a closed set of answers where the sampled free-text references are few: their reasoning is otherwise
never compared with them (the card counts them as unchecked)."""

from __future__ import annotations

from pathlib import Path

from faults import write_families

from rs.families import load_families
from rs.plan import plan_family


def test_plan_suggests_a_closed_set_for_few_free_text_references(tmp_path: Path) -> None:
    families = write_families(tmp_path, images=3, names=("Alpha",))  # "red" (free text) and counts (numbers)
    plan = plan_family(load_families(families)["Alpha"], sample_images=3)
    (note,) = [n for n in plan.notes if "closed_set" in n]
    assert note.startswith(
        "3 sampled answers are free text over only 1 distinct reference: their reasoning cannot be compared"
    )
    closed = families.read_text().replace(
        "    verifier: {name: exact}\n", "    verifier: {name: exact}\n    answers: {closed_set: true}\n"
    )
    families.write_text(closed)
    assert not [n for n in plan_family(load_families(families)["Alpha"], sample_images=3).notes if "closed_set" in n]
