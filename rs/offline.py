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
from urllib.parse import urlparse

logger = logging.getLogger(__name__)

__all__ = ["offline_unless_the_hub_resolves"]

_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def offline_unless_the_hub_resolves() -> bool:
    """Switch to offline mode when the Hub's host name does not resolve; whether it did switch.

    Nothing is checked when offline mode is already on, or behind a proxy (the proxy resolves names, not this machine).
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return False
    host = urlparse(constants.ENDPOINT).hostname
    if not host:
        return False
    try:
        socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        _go_offline()
        logger.warning("the Hub (%s) is out of reach: its name does not resolve (%s); working from local files and caches "
                       "only (HF_HUB_OFFLINE=1)", host, err.strerror if isinstance(err, OSError) else err)
        return True
    return False


def _go_offline() -> None:
    """Offline mode for the libraries already imported (they read it at import) and for those imported later."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    if (datasets_config := sys.modules.get("datasets.config")) is not None:
        datasets_config.HF_HUB_OFFLINE = True
