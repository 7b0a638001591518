"""Print a few cleaned rows of a family and its cleaning counts (`python -m rs.families preview`)."""

from __future__ import annotations

import sys
from typing import TextIO

from rs.families import Family
from rs.pipeline.clean import Cleaner
from rs.prompt import Instructions, build_prompt
from rs.sources import open_source
from rs.util.text import counted


def preview(family: Family, *, limit: int = 3, out: TextIO | None = None) -> None:
    """Stream and clean the first `limit` images; show their QA as the model will be asked them (on `out`, else the
    standard output of the moment: not the one there was when this module was imported)."""
    out = out if out is not None else sys.stdout
    source = open_source(family)
    cleaner = Cleaner(family.config, source.provenance(), base_dir=family.path.parent)
    print(f"{family.name}: {family.config.source.kind} source {source.provenance()}", file=out)
    shown = 0
    instructions = Instructions.of(family.config)
    for row in cleaner.rows(source, limit=limit):
        shown += 1
        print(
            f"\nrow {shown}: image {row.image_sha256[:16]}… ({len(row.image)} bytes), records {', '.join(row.record_ids)}",
            file=out,
        )
        for item in row.qa:
            prompt = build_prompt(item.question, instructions.for_item(item))
            notes = ", ".join(item.rewrites + item.flags)
            print(f"  [{item.key}] Q: {prompt!r}", file=out)
            print(f"  {' ' * len(item.key)}   A: {item.answer!r}" + (f"   ({notes})" if notes else ""), file=out)
    r = cleaner.report
    print(
        f"\ncleaning: {r.source_items} source QA in {counted(r.source_records, 'record')} -> {r.kept_items} kept in "
        f"{counted(r.rows, 'row')}, {sum(r.dropped.values())} dropped ({counted(r.merged_records, 'record')} merged into an "
        "image already seen)",
        file=out,
    )
    for reason, count in sorted(r.dropped.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  dropped {reason}: {count}", file=out)
    for step, stats in r.steps.items():
        for what, count in stats.rewritten.items():
            print(f"  rewritten by {step}: {what}: {count}", file=out)
        for what, count in stats.marked.items():
            print(f"  marked by {step}: {what}: {count}", file=out)
