"""The full decode of an image's pixel data, so that a file that does not decode never reaches the engine.

`Image.verify()` (the structure check `rs.pipeline.clean.image_problem` makes first) reads a PNG's chunks but
not a JPEG's entropy-coded data: a truncated JPEG passed it, the engine then failed on the item
(`engine_error`) and its row was published among the rejected. Decoding every pixel, as the engine
will, is the only check that agrees with the engine. It is bounded as the bomb checks are: it runs
only on images already under `MAX_IMAGE_BYTES` and `MAX_IMAGE_PIXELS` (at most ~360 MB of RGBA, a
second or so), and the decoded pixels are dropped at once: the original bytes travel on.
"""

from __future__ import annotations

import io
import warnings
from typing import Callable

from PIL import Image, ImageFile, UnidentifiedImageError


def decode_problem(image: bytes, inspect: Callable[[Image.Image], None] | None = None) -> str | None:
    """`undecodable_image` when the pixel data of `image` does not decode in full (truncated, corrupt), else None.

    `inspect` is handed the decoded image (decontamination's hashes, `rs.pipeline.clean.decontam`): no image is decoded twice."""
    truncated_allowed = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # a library that set it would let a truncated file decode as grey
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the caller has checked the pixel count
            with Image.open(io.BytesIO(image)) as im:
                im.load()
                if inspect is not None:
                    inspect(im)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError):
        return "undecodable_image"
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = truncated_allowed
    return None
