"""Re-reading a build's stored answers under the reader the family has now, with no engine (`rs refilter`).

A run's stores hold every answer it got (the greedy pass's in the items store, the recovery and difficulty samples in
the recovery store): the raw output, its final answer and reasoning as the reasoning format read them, and what the
reader (the verifier and the family's reading of answers, `rs.pipeline.sample.Reader`) and the judge made of it. When nothing
but the reader changed since the run (`READER_INPUTS`: a verifier's or `rs.answers`' version, the family's `verifier:`
or `answers:` block), every stored answer is graded again from its stored final answer and reasoning (the reasoning
format did not change, so neither did they):

- accepted or certainly wrong: routed as usual;
- undecided, and the judge's verdict on exactly that question, reference and candidate is in the stores (any answer's
  with the same three) or in the generation cache (under the judge identity the run recorded): that verdict, under the
  run's calibration;
- undecided, and no verdict: `rs.pipeline.route.NOT_ASKED` (routed `judge_not_asked`: neither accepted nor a certain rejection),
  counted, until `rs publish` asks the judge.

With a recovery pass, the questions a run under this reader would sample (`rs.pipeline.recover.samples_for`) get the samples
the stores hold (the same requests whatever the reason they were drawn for) or the cache holds; what neither holds is
counted and left to `rs publish`; samples of a question such a run would not sample are left out. Its suspect references
are found again under this reader, their adjudications taken from the cache and the adjudicator's calibration measured
again (`rs.refilter.suspects`); what could mark a question and was never adjudicated is refused.

The re-read stores go beside the run's (`<build>/reread/`), never over them: the run's stores stay what they are, and a
later `rs publish` finds its sample stage stale and runs it (from the cache, asking the judge what is missing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from rs.context import BuildContext
from rs.engines.base import Generation, Request
from rs.engines.cached_engine import key_function, sample_settings
from rs.engines.factory import sampling_settings
from rs.engines.generation_cache import GenerationCache
from rs.engines.machine import made_on_id
from rs.engines.reasoning import ReasoningFormat
from rs.errors import RsError, UsageError
from rs.families.schema import FamilyConfig
from rs.pipeline.clean import CleaningReport
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import RecoveryReport, recovery_inputs, recovery_settings, samples_for
from rs.pipeline.route import NOT_ASKED, Decision, Routes, outcome
from rs.pipeline.sample import Reader, SampleReport
from rs.pipeline.sample.blind import BLIND, BlindPass, regraded
from rs.pipeline.sample.judge import LABELS, Judge, JudgeCase
from rs.pipeline.sample.requests import sampling_request
from rs.pipeline.sample.stage import answer_vocabulary, sample_inputs
from rs.pipeline.stage import fingerprint, read_report, replace_dir, scratch
from rs.prompt import Instructions
from rs.records import ITEMS, RECOVERY, SampleRecord
from rs.refilter.suspects import Readjudication, Unadjudicated
from rs.store import ParquetStreamWriter, qa_item, read_records, write_json
from rs.util.checksums import damage, seal
from rs.util.disk import writing

logger = logging.getLogger(__name__)

READER_INPUTS = ("verifier", "answers", "versions.answers", "versions.verifiers", "versions.verifier")
"""What of the sample stage's inputs (`rs.pipeline.sample.stage.sample_inputs`) is the reader: a change of these alone is re-read; a
change of anything else (the model, the prompt, the sampling, the reasoning format, the judge, the cleaning) means the
stored answers are not the ones the family would get now, and `rs refilter` refuses."""

FOLDER = "reread"
"""The re-read stores, in the build they were read from."""


class NotRereadable(UsageError):
    """The stored answers cannot be re-read into what a run would make now: something besides the reader changed."""

    default_hint = (
        "run `rs publish FAMILY` (with the same --config, --build-dir and --limit): it samples what is missing"
    )


@dataclass(frozen=True)
class Change:
    """One input of the sample stage that differs between the run and now (`answers.literal`: false, true)."""

    what: str
    run: Any
    now: Any

    def __str__(self) -> str:
        return f"{self.what}: {json.dumps(self.run)} -> {json.dumps(self.now)}"


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changes(run: dict[str, Any], now: dict[str, Any]) -> list[Change]:
    """What differs between two sets of inputs, key by dotted key (`answers.literal`, `versions.verifier`)."""
    before, after = _flat(run), _flat(now)
    return [
        Change(key, before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


def of_the_reader(change: Change) -> bool:
    return any(change.what == name or change.what.startswith(name + ".") for name in READER_INPUTS)


@dataclass
class Basis:
    """What a re-read starts from: the run's reports, and what of the reader changed since."""

    clean: CleaningReport
    sampled: SampleReport
    recovered: RecoveryReport | None
    changed: list[Change]


def _stored(path: Path, kind: Any) -> Any:
    try:
        return kind(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _undamaged(ctx: BuildContext, folder: Path, what: str, *, present: bool) -> None:
    """A store whose report is there but whose files fail their checksums is named as damaged, with its damage (not as
    a store that holds nothing): `rs refilter` calls no model, so it cannot rebuild it."""
    if not present or ctx.intact(folder, "", "", say=False):
        return
    raise NotRereadable(
        f"{ctx.family.name}: the store of {what} {folder} is damaged: {damage(folder)}; `rs refilter` calls no model, "
        "so it cannot rebuild it",
        hint=f"`rs publish {ctx.family.name}` rebuilds it (the answers in the generation cache are reused), or refilter "
        "from the family's samples repo (--from-samples)",
    )


def basis(ctx: BuildContext) -> Basis:
    """The run's reports, when its stored answers can be re-read into what a run would make now; else `NotRereadable`,
    naming what else changed."""
    paths, name = ctx.paths, ctx.family.name
    clean = read_report(paths.clean_report, CleanStage().fingerprint(ctx), CleaningReport.from_dict)
    _undamaged(ctx, paths.clean, "cleaned rows", present=clean is not None)
    if clean is None:
        raise NotRereadable(
            f"{name}: {paths.root} holds no cleaned rows for the family's settings (its source or cleaning "
            "changed, or it was never built), and `rs refilter` calls no model: it re-routes the answers a run stored"
        )
    sampled = _stored(paths.sample_report, SampleReport.from_dict)
    _undamaged(ctx, paths.items, "stored answers", present=sampled is not None)
    if sampled is None:
        raise NotRereadable(
            f"{name}: {paths.root} holds no stored answers, and `rs refilter` calls no model: it re-routes "
            "the answers a run stored"
        )
    if sampled.inputs is None:
        raise NotRereadable(
            f"{name}: the answers in {paths.root} were stored by an older rs, which did not record what they "
            "depend on: whether they are still this family's answers cannot be told"
        )
    changed = changes(sampled.inputs, sample_inputs(ctx))
    other = [c for c in changed if not of_the_reader(c)]
    if other:
        raise NotRereadable(
            f"{name}: since the answers in {paths.root} were stored, more than the reader changed: "
            + "; ".join(str(c) for c in other[:6])
            + (f" and {len(other) - 6} more" if len(other) > 6 else "")
            + ". They are not the answers the family would get now; only a change of "
            + ", ".join(READER_INPUTS)
            + " is re-read offline"
        )
    recovered = None
    if ctx.family.config.recovery is not None:
        recovered = _stored(paths.recovery_report, RecoveryReport.from_dict)
        _undamaged(ctx, paths.recovery, "recovery samples", present=recovered is not None)
        if recovered is None or recovered.inputs is None:
            raise NotRereadable(
                f"{name}: {paths.root} holds no recovery samples the family's recovery block could use "
                "(never sampled, or by an older rs)"
            )
        other = [c for c in changes(recovered.inputs, recovery_inputs(ctx, sampled)) if c.what != "versions.route"]
        if other:
            raise NotRereadable(
                f"{name}: the recovery pass changed since its samples in {paths.root} were drawn: "
                + "; ".join(str(c) for c in other[:6])
            )
    return Basis(clean, sampled, recovered, changed)


# -- verdicts and samples the run left ------------------------------------------------------------------------------


def _case_key(question: str, reference: str, candidate: str) -> bytes:
    """The judge request's identity: its question, reference and candidate (the judge sees nothing else)."""
    return hashlib.sha256(f"{question}\0{reference}\0{candidate}".encode()).digest()[:16]


class _Cache:
    """The run's answers and verdicts in the generation cache, found under the engine identities the run recorded
    (`SampleReport.identities`), with no engine. Where it cannot be read, `problem` says why (and nothing is found)."""

    def __init__(self, path: Path | None, sampled: SampleReport, config: FamilyConfig):
        self.problem: str | None = None
        self.cache: GenerationCache | None = None
        self.judge: Judge | None = None
        self.reading: ReasoningFormat | None = None
        identities = sampled.identities or {}
        self.identity = identities.get("sampler")
        if path is None or not Path(path).is_file():
            self.problem = "there is no generation cache where the command was told to look (--cache)"
            return
        if not identities:
            self.problem = "the run recorded no engine identities (an older rs): its cached answers cannot be found without an engine"
            return
        self.cache = GenerationCache(path)
        settings = sampling_settings(config)
        self.settings = recovery_settings(config, settings) if config.recovery is not None else settings
        self.instructions = Instructions.of(config)
        try:  # what a vLLM reasoning parser needs (the model's tokenizer) an offline re-read does not load
            if identities.get("judge") and config.judge.enabled:
                judge = Judge(
                    None,
                    config.judge,
                    reasoning=(config.judge.model or config.model).reasoning,  # type: ignore[arg-type]
                    chat_template_kwargs=settings.chat_template_kwargs,
                )
                self.judge_key = key_function(identities["judge"], judge.settings)
                self.judge = judge
            reading = ReasoningFormat(config.model.reasoning, chat_template_kwargs=settings.chat_template_kwargs)
            reading.check()
            self.reading = reading
        except RsError as err:
            self.problem = f"the run's cached answers cannot be read without the model's tokenizer ({err})"

    def verdict(self, case: JudgeCase) -> str | None:
        if self.cache is None or self.judge is None:
            return None
        request = self.judge.request(case)  # with the image's hash when the judge sees it
        key = self.judge_key(request.image_hash(), request.prompt)
        found = self.cache.get_many([key], settings=self.judge.settings).get(key)
        return self.judge.verdict(found)[0] if found is not None else None

    def sample(self, request: Request, index: int) -> Generation | None:
        """Recovery sample `index` of `request`, read with the family's reasoning format; None when not cached."""
        if self.cache is None or self.reading is None or not self.identity:
            return None
        settings = sample_settings(self.settings, index)
        key = key_function(self.identity, settings)(request.image_hash(), request.prompt)
        found = self.cache.get_many([key], settings=settings).get(key)
        return self.reading.read(found) if found is not None else None

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _joined(root: Path, recovery: bool) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    """Each stored item with its cleaned question (`qa`, with the row's `image_sha256`) and its recovery record, in order."""
    rows = read_records(root / "clean", "rows", batch_rows=64, columns=["image_sha256", "qa"])
    draws = read_records(root / "recovery", "recovery") if recovery else iter(())
    items = read_records(root / "items", "items")
    pending = next(draws, None)
    for index, row in enumerate(rows):
        for qa in row["qa"]:
            item = next(items, None)
            if item is None or item["row"] != index or item["key"] != qa["key"]:
                raise RsError(
                    f"the items store of {root} does not match its cleaned rows at row {index}; rebuild the family"
                )
            mine = None
            if pending is not None and pending["row"] == index and pending["key"] == qa["key"]:
                mine, pending = pending, next(draws, None)
            yield {**qa, "image_sha256": row["image_sha256"]}, item, mine


# -- the re-read ----------------------------------------------------------------------------------------------------


@dataclass
class Reread:
    """What re-reading changed, for the cards and the command's output (`rs/stats.json`'s `filter.reread`)."""

    changed: list[Change]
    reader: dict[str, str]
    """The versions of the reader that made the splits (`answers`, `verifiers`, `verifier`)."""
    questions: int = 0
    answers: int = 0
    """Answers re-read: each question's greedy answer and the samples it was given."""
    outcomes_changed: int = 0
    """Answers whose reader outcome (accepted, certain, undecided) is not the run's."""
    decisions: Counter[str] = field(default_factory=Counter)
    """Questions whose routing changed: `accepted_to_rejected`, `rejected_to_accepted`, `other` (by whom, or why)."""
    verdicts: Counter[str] = field(default_factory=Counter)
    """Judge verdicts used: found in the `stores` or in the `cache`."""
    not_asked: int = 0
    """Undecided answers the judge was never asked about (`NOT_ASKED`)."""
    not_asked_questions: int = 0
    """Questions routed `judge_not_asked`: their greedy answer is one, and no sample was accepted."""
    questions_unjudged: int = 0
    """Questions with at least one such answer (greedy or sample): asking the judge may change their decision or pass rate."""
    certain_not_judged: int = 0
    """Greedy answers now certainly wrong that the run's judge never saw (a run shows it every rejection, to measure it)."""
    samples_cached: int = 0
    """Samples a run under this reader would draw that the stores lack and the cache holds (read from it)."""
    samples_missing: int = 0
    """Samples a run under this reader would draw that neither the stores nor the cache hold."""
    questions_short: int = 0
    samples_unused: int = 0
    """Questions whose stored samples a run under this reader would not draw (left out)."""
    cache: str | None = None
    """Why the generation cache was not consulted; None when it was."""
    command: str = ""
    """What asks the judge and draws the missing samples: `rs publish FAMILY ...` (said by the command, not the cards: it
    names this machine's paths)."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "changed": [asdict(c) for c in self.changed],
            "reader": self.reader,
            "questions": self.questions,
            "answers": self.answers,
            "outcomes_changed": self.outcomes_changed,
            "decisions": {
                "changed": sum(self.decisions.values()),
                **{k: self.decisions[k] for k in ("accepted_to_rejected", "rejected_to_accepted", "other")},
            },
            "verdicts": {k: self.verdicts[k] for k in ("stores", "cache")},
            "judge_not_asked": self.not_asked,
            "judge_not_asked_questions": self.not_asked_questions,
            "questions_unjudged": self.questions_unjudged,
            "certain_not_judged": self.certain_not_judged,
            "samples_cached": self.samples_cached,
            "samples_missing": self.samples_missing,
            "questions_short": self.questions_short,
            "samples_unused": self.samples_unused,
            "cache": self.cache,
        }


def _reader_versions(inputs: dict[str, Any]) -> dict[str, str]:
    versions = inputs["versions"]
    return {name: versions[name] for name in ("answers", "verifiers", "verifier")}


def _outcome_of(record: dict[str, Any]) -> str | None:
    if record["error"] is not None or record["final"] is None:
        return None
    return "accepted" if record["verified"] else "certain" if record["contradicts"] else "undecided"


def _transition(before: Decision, after: Decision) -> str | None:
    if (before.accepted, before.by, before.reason) == (after.accepted, after.by, after.reason):
        return None
    if before.accepted != after.accepted:
        return "accepted_to_rejected" if before.accepted else "rejected_to_accepted"
    return "other"


class _Rereader:
    """Grades stored answers again and finds their verdicts; counts what it did in `summary`."""

    def __init__(self, ctx: BuildContext, cache: _Cache, verdicts: dict[bytes, str], summary: Reread):
        config = ctx.family.config
        self.reader = Reader(config, answer_vocabulary(ctx))
        self.judge_on = config.judge.enabled
        self.cache, self.verdicts, self.summary = cache, verdicts, summary
        self.instructions = Instructions.of(config)

    def verdict(self, case: JudgeCase) -> str:
        found = self.verdicts.get(_case_key(case.question, case.reference, case.candidate))
        if found is not None:
            self.summary.verdicts["stores"] += 1
            return found
        cached = self.cache.verdict(case)
        if cached is not None:
            self.summary.verdicts["cache"] += 1
            return cached
        return NOT_ASKED

    def grade(
        self, qa: Any, prompt: str, image_sha256: str, record: dict[str, Any], *, greedy: bool, stored: bool = True
    ) -> dict[str, Any]:
        """`record` (a stored answer to `prompt` about the image `image_sha256`; with `stored` False, one read from the cache)
        graded again: its outcome, its reasoning check and its verdict."""
        generation = Generation(
            text=record["text"],
            reasoning=record["reasoning"],
            answer=record["final"],
            finish_reason=record["finish_reason"],
            error=record["error"],
        )
        v = self.reader.grade(qa, prompt, generation, image_sha256=image_sha256)
        asked = (
            v.case is not None and self.judge_on and (greedy or not v.contradicts)
        )  # a run judges certain samples not
        judge = self.verdict(v.case) if asked and v.case is not None else None
        new = {
            **record,
            "verified": v.verified,
            "contradicts": v.contradicts,
            "reasoning_agrees": v.reasoning_agrees,
            "judge": judge,
        }
        self.summary.answers += stored
        self.summary.outcomes_changed += stored and _outcome_of(new) != _outcome_of(record)
        if judge == NOT_ASKED:
            self.summary.not_asked += not v.contradicts
            self.summary.certain_not_judged += v.contradicts
        return new


class _Blind:
    """The no-image records graded again under the reader now (`rs.pipeline.sample.blind.regraded`), in item order beside
    the stored items, recounted into the re-read report's `blind`."""

    def __init__(self, ctx: BuildContext, reader: Reader, report: SampleReport):
        config = ctx.family.config
        assert config.blind is not None and report.blind is not None
        settings = sampling_settings(config)
        letters = config.cleaning.step("multiple_choice").letters
        self.asker = BlindPass(config.blind, Instructions.of(config), letters, None, settings, settings)  # type: ignore[arg-type]
        self.reader, self.report = reader, report.blind
        self.records = read_records(ctx.paths.root / "items", "blind")
        self.report.marked = self.report.right = 0

    def regrade(self, qa: Any, stored: dict[str, Any]) -> dict[str, Any]:
        record = next(self.records, None)
        if record is None or (record["row"], record["key"]) != (stored["row"], stored["key"]):
            raise RsError(
                f"the no-image records of the build do not match its items at {stored['key']}; rebuild the family"
            )
        new = regraded(record, self.asker.asks(qa), self._right)
        self.report.marked += new["marked"]
        self.report.right += bool(new["right"] and new["right"][0])
        return new

    def _right(self, item: Any, answer: str) -> bool:
        generation = Generation(text=answer, reasoning=None, answer=answer, finish_reason="stop")
        return self.reader.grade(item, "", generation).verified


def reread(ctx: BuildContext, basis: Basis, *, cache_path: Path | None, routes: Routes, command: str) -> Reread:
    """Re-read the stores of `ctx` into `<build>/reread/` (`FOLDER`) under the family's reader now; returns what it changed.

    `routes`: how the splits will be routed (the route filter applied), to count the decisions that changed."""
    start = time.perf_counter()
    root, out = ctx.paths.root, ctx.paths.root / FOLDER
    config = ctx.family.config
    sampled, recovery = basis.sampled, config.recovery
    summary = Reread(basis.changed, _reader_versions(sample_inputs(ctx)), command=command)
    verdicts = _stored_verdicts(root, recovery is not None)
    cache = _Cache(cache_path, sampled, config)
    summary.cache = cache.problem
    tmp = out.with_name(out.name + ".tmp")
    report = replace(
        sampled,
        verified=0,
        contradicted=0,
        undecided=0,
        reasoning_disagrees=0,
        reasoning_unchecked=0,
        judged=0,
        verdicts=Counter(),
        contradicted_verdicts=Counter(),
        sampling_engine_calls=0,
        judge_engine_calls=0,
        blind=replace(sampled.blind, requests=0, engine_calls=0) if sampled.blind is not None else None,
    )
    recovered = RecoveryReport() if recovery is not None else None
    if recovered is not None and basis.recovered is not None:  # the stored samples' machines (`made_on`)
        recovered.machines = dict(basis.recovered.machines)
    try:
        with writing("the re-read stores", tmp), scratch(tmp):
            _link_store(root / "clean", tmp / "clean")
            shutil.copyfile(root / "clean.json", tmp / "clean.json")
            rereader = _Rereader(ctx, cache, verdicts, summary)
            suspects = (
                Readjudication(config, rereader.reader, cache.cache, cache.identity, cache.problem)
                if recovery is not None and recovery.suspects
                else None
            )
            waiting: list[tuple[int, Decision, dict[str, Any], dict[str, Any] | None]] = []
            """The candidates' decisions before, until the adjudication decides them after."""
            with (
                ParquetStreamWriter(tmp / "items", "items", ITEMS, group_rows=10_000, group_bytes=32 << 20) as items,
                ParquetStreamWriter(
                    tmp / "recovery", "recovery", RECOVERY, group_rows=2_000, group_bytes=32 << 20
                ) as draws,
                ParquetStreamWriter(tmp / "items", "blind", BLIND, group_rows=10_000) as blinded,
            ):
                blind = _Blind(ctx, rereader.reader, report) if config.blind is not None else None
                for at, (cleaned, stored, stored_draws) in enumerate(_adjudicated(root, recovery is not None)):
                    qa = qa_item(cleaned)
                    if blind is not None:
                        blinded.write(blind.regrade(qa, stored))
                    item = rereader.grade(qa, stored["prompt"], cleaned["image_sha256"], stored, greedy=True)
                    _count_greedy(report, item)
                    new_draws = None
                    if recovery is not None and recovered is not None:
                        new_draws = _resample(
                            rereader,
                            cache,
                            config,
                            qa,
                            cleaned["image_sha256"],
                            item,
                            stored_draws,
                            sampled.promotes,
                            recovered,
                        )
                        if new_draws is not None:
                            draws.write(new_draws, size=sum(len(s["text"]) for s in new_draws["samples"]))
                    items.write(item, size=len(item["text"]) + len(item["prompt"]))
                    summary.questions += 1
                    before = outcome(stored, stored_draws, routes.promotes).decision
                    if suspects is not None and suspects.offer(at, qa, cleaned["image_sha256"], item, new_draws):
                        waiting.append((at, before, item, new_draws))
                    else:
                        _decided(summary, before, outcome(item, new_draws, routes.promotes).decision)
                    summary.questions_unjudged += any(
                        _unjudged(a) for a in [item, *(new_draws["samples"] if new_draws else [])]
                    )
            seal(tmp / "items")
            report.inputs = sample_inputs(ctx)
            report.fingerprint = fingerprint(report.inputs)
            report.seconds = time.perf_counter() - start
            write_json(tmp / "sample.json", report.to_dict())
            if suspects is not None and recovered is not None:
                try:
                    adjudicated = suspects.adjudicate(tmp / "recovery", ctx.family.name)
                except Unadjudicated as err:
                    raise NotRereadable(
                        str(err),
                        hint=f"run `rs publish {ctx.family.name}` (with the same --config, --build-dir and --limit): "
                        "it asks the adjudicator (the cached answers are reused)",
                    ) from None
                recovered.adjudication = adjudicated.report
                for at, before, item, new_draws in waiting:
                    marked = {**new_draws, "adjudication": adjudicated.records[at]} if new_draws is not None else None
                    _decided(summary, before, outcome(item, marked, routes.promotes).decision)
            if recovered is not None:
                seal(tmp / "recovery")
                recovered.inputs = recovery_inputs(ctx, report)
                recovered.fingerprint = fingerprint(recovered.inputs)
                write_json(tmp / "recovery.json", recovered.to_dict())
            else:
                shutil.rmtree(tmp / "recovery", ignore_errors=True)
            summary.seconds = time.perf_counter() - start
            write_json(tmp / "reread.json", summary.to_dict())
            replace_dir(tmp, out)
    finally:
        cache.close()
    logger.info(
        "%s: re-read %d answers of %d questions under the current reader in %.1f s",
        ctx.family.name,
        summary.answers,
        summary.questions,
        summary.seconds,
    )
    return summary


def _decided(summary: Reread, before: Decision, after: Decision) -> None:
    """A question's decision under the run's reader and under the reader now, counted."""
    if (change := _transition(before, after)) is not None:
        summary.decisions[change] += 1
    summary.not_asked_questions += after.reason == "judge_not_asked"


def _adjudicated(root: Path, recovery: bool) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    """`_joined`, each candidate's recovery record with the run's adjudication record (`adjudication`, as the routing
    reads it: `rs.pipeline.route`), so that the decisions before are the run's, suspects included."""
    records = read_records(root / "recovery", "adjudication") if recovery else iter(())
    pending = next(records, None)
    for cleaned, stored, draws in _joined(root, recovery):
        if (
            draws is not None
            and pending is not None
            and (pending["row"], pending["key"]) == (draws["row"], draws["key"])
        ):
            draws, pending = {**draws, "adjudication": pending}, next(records, None)
        yield cleaned, stored, draws
    if pending is not None:
        raise RsError(
            f"the adjudication records of {root / 'recovery'} name an item its samples lack (row {pending['row']}); "
            "rebuild the family"
        )


def _unjudged(answer: dict[str, Any]) -> bool:
    """An undecided answer the judge was not asked about (a certain one is decided without it)."""
    return answer["judge"] == NOT_ASKED and not answer["contradicts"]


def _stored_verdicts(root: Path, recovery: bool) -> dict[bytes, str]:
    """Every verdict the run's judge gave, by its request's question, reference and candidate."""
    found: dict[bytes, str] = {}
    for _, item, draws in _joined(root, recovery):
        for answer in [item, *(draws["samples"] if draws else [])]:
            if answer["judge"] in LABELS and answer["final"] is not None:
                found[_case_key(item["prompt"], item["reference"], answer["final"])] = answer["judge"]
    return found


def _link_store(src: Path, dst: Path) -> None:
    """The run's cleaned rows, linked (copied where a link cannot be made), manifest included."""
    dst.mkdir(parents=True)
    for path in sorted(src.iterdir()):
        try:
            os.link(path, dst / path.name)
        except OSError:
            shutil.copyfile(path, dst / path.name)


def _count_greedy(report: SampleReport, item: dict[str, Any]) -> None:
    """What the sample stage counts of a greedy answer's grading (`SamplingPass._answered`, `judged`)."""
    answered = item["error"] is None and item["final"] is not None
    report.verified += item["verified"]
    report.contradicted += item["contradicts"]
    report.reasoning_disagrees += item["reasoning_agrees"] is False
    report.reasoning_unchecked += item["verified"] and item["reasoning_agrees"] is None
    report.undecided += answered and not item["verified"] and not item["contradicts"]
    if item["judge"] in LABELS:
        report.judged += 1
        report.verdicts[item["judge"]] += 1
        if item["contradicts"]:
            report.contradicted_verdicts[item["judge"]] += 1


def _resample(
    rereader: _Rereader,
    cache: _Cache,
    config: FamilyConfig,
    qa: Any,
    image_sha256: str,
    item: dict[str, Any],
    stored: dict[str, Any] | None,
    promotes: bool,
    report: RecoveryReport,
) -> dict[str, Any] | None:
    """The recovery record a run under this reader would write for `item`: the samples `samples_for` asks, from the
    stored ones (graded again) or the cache (read and graded); None when it samples nothing or none is held."""
    assert config.recovery is not None
    why, k = samples_for(item, promotes, config.recovery)
    summary = rereader.summary
    if why is None:
        summary.samples_unused += stored is not None
        return None
    held = {s["sample"]: s for s in stored["samples"]} if stored is not None else {}
    request = sampling_request(qa, rereader.instructions, image_sha256)
    seed = recovery_settings(config, sampling_settings(config)).seed
    samples, missing = [], 0
    for index in range(k):
        if index in held:
            samples.append(rereader.grade(qa, item["prompt"], image_sha256, held[index], greedy=False))
            continue
        generation = cache.sample(request, index)
        if generation is None:
            missing += 1
            continue
        record = vars(
            SampleRecord(
                sample=index,
                seed=seed + index,
                text=generation.text,
                reasoning=generation.reasoning,
                final=generation.answer,
                finish_reason=generation.finish_reason,
                ending=generation.ending,
                completion_tokens=generation.completion_tokens,
                thinking_tokens=generation.thinking_tokens,
                error=generation.error,
                verified=False,
                contradicts=False,
                judge=None,
                reasoning_agrees=None,
                made_on=made_on_id(generation),
            )
        )
        samples.append(rereader.grade(qa, item["prompt"], image_sha256, record, greedy=False, stored=False))
        summary.samples_cached += 1
    summary.samples_missing += missing
    summary.questions_short += bool(missing)
    if not samples:
        return None
    report.items[why] += 1
    for s in samples:
        answered = s["error"] is None and s["final"] is not None
        report.samples += 1
        report.verified += s["verified"]
        report.contradicted += s["contradicts"]
        report.undecided += answered and not s["verified"] and not s["contradicts"]
        report.engine_errors += s["error"] is not None
        report.no_final_answer += s["error"] is None and s["final"] is None and s["ending"] != "repetition"
        report.endings[s["ending"]] += 1
        if s["judge"] in LABELS:
            report.judged += 1
            report.verdicts[s["judge"]] += 1
    return {"row": item["row"], "key": item["key"], "why": why, "k": len(samples), "samples": samples}
