"""Work offline at once when the Hub cannot be reached, rather than after minutes of retries.

`huggingface_hub` retries each file five times with a backoff (about 23 s a file) when the Hub's
name does not resolve: `rs plan` of a Hub family on a machine without network sat silent for
over three minutes before saying the source and model were out of reach. A command that can do
useful work offline asks once whether the Hub's host resolves, and when it does not, switches
the Hub libraries to offline mode (`HF_HUB_OFFLINE=1`) for the rest of the process and says so.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from rs.families import Family

logger = logging.getLogger(__name__)

__all__ = ["hub_needs", "offline_unless_the_hub_resolves"]

_decided: bool | None = None
"""Whether this process already switched offline (the question is asked, and the answer said, once)."""


def hub_needs(family: Family, *, publishing: bool = False) -> list[str]:
    """What a command on this family reads from (or writes to) the Hub: its source, its models, the target repos.

    A family built from local files or synthetic scenes, with a built-in or local model, needs nothing from it.
    """
    c = family.config
    needs = []
    if c.source.kind == "hub" and not Path(c.source.path).exists():
        needs.append(f"its source {c.source.path}")
    for model in dict.fromkeys(m.id for m in (c.model, c.judge.model) if m is not None):
        if not model.startswith("rs:") and not Path(model).expanduser().exists():
            needs.append(f"its model {model}")
    if publishing:
        needs.append(f"the repos {c.publish.namespace}/{family.repo_name('think')} and its siblings")
    return needs


_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def offline_unless_the_hub_resolves(needs: list[str] | None = None, *, say: bool = True) -> bool:
    """Switch to offline mode when the Hub's host name does not resolve; whether it did switch.

    `needs`: what the command reads from the Hub (`hub_needs`); when it is empty, nothing is asked and nothing said
    (a family that needs nothing from the Hub works the same offline). Nothing is checked when offline mode is already
    on, or behind a proxy (the proxy resolves names, not this machine). It is said once a process, in one warning
    (`say=False`: not at all, the caller's error says it).
    """
    global _decided
    from huggingface_hub import constants

    if needs is not None and not needs:
        return False
    if _decided is not None:
        return _decided
    if constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return False
    host = urlparse(constants.ENDPOINT).hostname
    if not host:
        return False
    try:
        socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        _go_offline()
        _decided = True
        reading = [n for n in needs or [] if not n.startswith("the repos ")]
        where = (
            f"{' and '.join(reading)} must be in the local Hugging Face cache"
            if reading
            else "working from local files and caches only"
        )
        if say:
            logger.warning(
                "the Hub (%s) is out of reach: its name does not resolve (%s); %s (HF_HUB_OFFLINE=1)",
                host,
                err.strerror if isinstance(err, OSError) else err,
                where,
            )
        return True
    _decided = False
    return False


def _go_offline() -> None:
    """Offline mode for the libraries already imported (they read it at import) and for those imported later."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    if (datasets_config := sys.modules.get("datasets.config")) is not None:
        datasets_config.HF_HUB_OFFLINE = True
