"""The token to publish with, found where the Hub clients look, and kept out of everything that leaves the process."""

from __future__ import annotations

import os

import huggingface_hub

from rs.errors import UsageError


class MissingTokenError(UsageError, RuntimeError):
    """No Hugging Face token was found where the Hub clients look for one."""


def resolve_token(token: str | None = None) -> str:
    """The token to publish with: `token`, else `HF_TOKEN`, else the one stored by `hf auth login`.

    Resolved up front (rather than letting the client find none and answer 401 per repo) so a missing
    login fails before any work, with a message that says how to fix it.
    """
    for candidate in (token, os.environ.get("HF_TOKEN"), huggingface_hub.get_token()):
        if candidate and candidate.strip():
            return candidate.strip()
    raise MissingTokenError(
        "No Hugging Face token found. Run `hf auth login` (or set the HF_TOKEN environment variable) "
        "with a token that has write access to the target namespace, then run the command again."
    )


def optional_token(token: str | None) -> str | None:
    """The token when there is one (a dry run works without: it reads the public view)."""
    try:
        return resolve_token(token)
    except MissingTokenError:
        return None


def redact(text: str, token: str | None) -> str:
    """Mask the token in text that leaves this package (exception messages, log lines)."""
    return text.replace(token, "hf_***") if token else text
