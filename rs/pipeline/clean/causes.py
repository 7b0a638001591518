"""What usually makes every record of a source dropped for a reason: a wrong configuration, said where it is found.

A run whose cleaning keeps nothing (`rs.pipeline.clean.nothing_kept`) and an evaluation split of which no image opens
(`rs.pipeline.clean.decontam.index`) name their most frequent reason with its likely cause from here.
"""

from __future__ import annotations

__all__ = ["LIKELY_CAUSES"]

LIKELY_CAUSES = {
    "missing_image": "the image column holds no image: source.columns.image names another column (the question's?), or "
    "its paths are relative to another folder than the one the source reads them from",
    "no_image": "the image column is empty in every record: source.columns.image names the wrong column",
    "multiple_images": "every record holds several images: a family of one image per question needs another source shape",
    "undecodable_image": "the image column holds bytes that are not an image: source.columns.image names the wrong column",
    "empty_image": "the image column is empty: source.columns.image names the wrong column",
    "empty_question": "the question column is empty: source.columns.question names the wrong column",
    "empty_answer": "the answer column is empty: source.columns.answer names the wrong column",
    "foreign_source": "the source is not the dataset this family's cleaning was written for",
}
