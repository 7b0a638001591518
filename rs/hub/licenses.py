"""The license identifiers the Hugging Face Hub knows for a repo's `license:` (https://huggingface.co/docs/hub/repositories-licenses).

A card whose license is not one of them (`cc-by-4`) is published with a license the Hub shows as
unknown and filters out; a families file names one of these, or `other` with the terms in the card.
"""

from __future__ import annotations

import difflib

HUB_LICENSES = frozenset(
    """
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m afl-3.0
artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5 cc-by-3.0
cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0 cc-by-nc-nd-4.0
cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0
epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc h-research
intel-research lppl-1.3c ms-pl apple-ascl apple-amlr mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql ofl-1.1 ncsa
unlicense zlib pddl lgpl-lr deepfloyd-if-license fair-noncommercial-research-license llama2 llama3 llama3.1 llama3.2
llama3.3 llama4 gemma unknown other
""".split()
)


def license_problem(license_: str) -> str | None:
    """Why `license_` is not a Hub license identifier, with the closest ones; None when it is one."""
    if license_ in HUB_LICENSES:
        return None
    close = difflib.get_close_matches(license_.lower(), sorted(HUB_LICENSES), n=3, cutoff=0.6)
    near = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return (
        f"{license_!r} is not a license identifier of the Hugging Face Hub{near}; the Hub's identifiers are listed at "
        "https://huggingface.co/docs/hub/repositories-licenses (`other` for terms of their own, stated in the card)"
    )
