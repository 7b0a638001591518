"""What `rs families validate` checks beyond the schema: everything a family needs that this machine can see.

The loader checks the YAML itself (keys, types, values; `engine.args` against the installed vLLM's
arguments). A family can still be valid YAML and unable to run: a local source's file misspelt, a
column named wrongly, a built-in model id that does not exist. Those are checked here without a GPU
or the network, and reported at the file and line of the key. What needs the network (a Hub
dataset's columns, a Hub model's files) is not checked, and said so: `validate` never claims more
than it saw.
"""

from __future__ import annotations

from pathlib import Path

from rs.engines.models import resolve_model
from rs.engines.vllm_args import known_engine_args
from rs.errors import UsageError
from rs.families.loader import Family, FamilyConfigError, locate
from rs.registry import SOURCES
from rs.util import invocation

__all__ = ["probe_family"]


def probe_family(family: Family, *, loads_model: bool = False) -> list[str]:
    """Check a family's local files, source columns and model ids; returns what could not be checked here.

    `loads_model`: the command goes on to load the model in this process (a vLLM engine), so a Hub model that an offline
    run cannot load is an error; otherwise it is said in what was not checked.

    Raises `FamilyConfigError` (file:line, the key, what to do) on the first problem.
    """
    c = family.config
    not_checked: list[str] = []
    source = SOURCES.get(c.source.kind).from_config(c.source, base_dir=family.path.parent)
    check = getattr(source, "check", None)
    if c.source.kind == "hub":
        not_checked.append(
            f"the Hub source {SOURCES.get('hub').label(c.source)} (`{invocation.command('families', 'preview', family.name, config=family.path, carry=('--config',))}` reads a few records)"
        )
    elif check is not None:
        try:
            not_checked += check()
        except UsageError as err:
            key = getattr(err, "key", "path")
            problem = str(err).removeprefix(f"{key}: ").removeprefix(f"source.{key} ")
            raise FamilyConfigError(
                f"{locate(family, f'source.{key}')}: families.{family.name}.source.{key}: {problem}", hint=err.hint
            ) from None
    for key, model in (("model", c.model), ("judge.model", c.judge.model)):
        if model is not None:
            not_checked += _check_model(
                family, key, model.id, model.revision, loads=loads_model and c.engine.kind == "vllm"
            )
    if c.engine.kind == "vllm" and known_engine_args() is None:
        not_checked.append("engine.args (vLLM is not installed here, or its argument list could not be read)")
    elif c.engine.kind == "openai":
        not_checked.append(f"the server at {c.engine.base_url}")
    elif c.engine.kind == "replay":
        path = Path(c.engine.replay_path).expanduser()
        path = path if path.is_absolute() else family.path.parent / path
        if not path.is_file():
            raise FamilyConfigError(
                f"{locate(family, 'engine.replay_path')}: families.{family.name}.engine.replay_path: "
                f"{c.engine.replay_path!r}: {path.absolute()} is not a file",
                hint=None
                if Path(c.engine.replay_path).expanduser().is_absolute()
                else "a relative replay_path is relative to the families file's folder",
            )
    return not_checked


def _check_model(
    family: Family, key: str, model_id: str, revision: str | None = None, *, loads: bool = False
) -> list[str]:
    """A built-in id must exist, a local folder must hold a model; a Hub id must be in the local cache when offline, else
    it is only named."""
    if model_id.startswith("rs:"):
        try:
            resolve_model(model_id)
        except (ValueError, RuntimeError) as err:  # an unknown built-in id; shipped weights that fail their checksums
            raise FamilyConfigError(f"{locate(family, f'{key}.id')}: families.{family.name}.{key}.id: {err}") from None
        return []
    path = Path(model_id).expanduser()  # vLLM and transformers read a relative path from the working directory
    if path.is_absolute() or model_id.startswith((".", "~")):
        if not (path / "config.json").is_file():
            raise FamilyConfigError(
                f"{locate(family, f'{key}.id')}: families.{family.name}.{key}.id: {model_id!r} is a local path, "
                f"but {path} holds no model (no config.json)",
                hint="give the folder of a saved model (config.json, weights, tokenizer) or a Hub id",
            )
        return []
    whose = " (the judge's)" if key == "judge.model" else ""
    if (missing := _not_cached_offline(model_id, revision)) is not None:
        if not loads:
            return [
                f"the Hub model {model_id}{whose} (offline, and not in the local Hugging Face cache: a run here could not "
                "load it)"
            ]
        raise FamilyConfigError(
            f"{locate(family, f'{key}.id')}: families.{family.name}.{key}.id: {missing}",
            hint="check the id's spelling (`hf cache ls` lists the models cached here), or download it "
            "while online (`hf download ID`), or unset HF_HUB_OFFLINE",
        )
    return [f"the Hub model {model_id}{whose}"]


def _not_cached_offline(model_id: str, revision: str | None) -> str | None:
    """Why an offline run cannot load the Hub model `model_id` (not in the local cache), or None (online, or cached)."""
    from huggingface_hub import constants, try_to_load_from_cache

    if not constants.HF_HUB_OFFLINE:
        return None
    try:
        found = try_to_load_from_cache(model_id, "config.json", revision=revision)
    except ValueError as err:  # not a valid repo id at all
        return f"{model_id!r} is not a Hub model id ({err})"
    if isinstance(found, str):
        return None
    return (
        f"the Hub model {model_id!r}"
        + (f" at revision {revision!r}" if revision else "")
        + f" is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}), and the Hub is offline (HF_HUB_OFFLINE)"
    )
