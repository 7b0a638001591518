"""Where a family's repos are published: a local folder laid out as the Hub repos, or the Hub; one interface for both.

Both targets compare the assembled repos with what they hold now through the same diff (`rs.hub.diff`: the same
files in scope, the same actions, the same result per repo, `rs.hub.PublishResult`), and both make each repo change
in one step: the Hub in one commit (or a pull request merged once, `rs.hub.publish_folder`), a local folder in one
transaction for the whole family (`rs.pipeline.publish.local`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Iterator

from rs.context import BuildContext
from rs.errors import UsageError
from rs.families import Family
from rs.hub import PublishResult, publish_folder, resolve_token
from rs.hub.diff import diff, folder_state, scan_folder
from rs.hub.names import PathEscapeError, confined
from rs.pipeline.publish import local
from rs.pipeline.publish.cards.render import HUB_URL
from rs.pipeline.publish.preflight import (
    check_local_root,
    check_overlap,
    check_release_kept,
    check_repo_paths,
    check_trial,
)
from rs.util import ledger
from rs.util.disk import writing
from rs.util.locks import publish_lock

logger = logging.getLogger("rs.pipeline.publish")


class Target(ABC):
    """Where the repos go. A publish checks the target before the build, holds it while it publishes, and hands it the
    assembled repos: it returns, for each split, what changed (a dry run: what would change)."""

    local: bool
    """A local folder (cards link their siblings relatively; no commits)."""

    @abstractmethod
    def check(self, ctx: BuildContext, *, dry_run: bool) -> None:
        """Refuse before the build what would fail after it."""

    @abstractmethod
    def where(self, family: Family, split: str) -> str:
        """Where a split's repo is published: its folder, or its Hub page."""

    @abstractmethod
    def published(self, ctx: BuildContext, split: str, *, needed: bool) -> Path | None:
        """The published repo of `split` as a folder, for what a cards-only run without a build reads of it; `needed`:
        the run has no build (a target that must fetch the repo does so only then)."""

    def held(self, family: Family, *, dry_run: bool) -> ContextManager[None]:
        """Held while the family is built, assembled and published (one publish into the target at a time)."""
        return nullcontext()

    @abstractmethod
    def publish(
        self, family: Family, assembled: dict[str, Path], *, only: Sequence[str] | None, dry_run: bool, progress: bool
    ) -> dict[str, PublishResult]:
        """Make each repo of the target hold its assembled folder (within `only`); a dry run changes nothing."""


@dataclass
class LocalTarget(Target):
    """A local folder (`--out` or `publish.local_dir`), the repos under `root` (the folder / the namespace)."""

    folder: Path
    root: Path
    named: str
    """The flag or setting that names the folder, for messages."""
    force: bool = False
    """A `--limit` trial may replace a release published there (`--force`)."""
    local = True

    def check(self, ctx: BuildContext, *, dry_run: bool) -> None:
        check_overlap(self.folder, self.named, ctx.build_root, ctx.cache_path)
        check_local_root(self.folder, self.named)
        check_repo_paths(ctx.family, self.root, self.named)
        if not dry_run:  # a dry run changes nothing: it shows what the trial would replace
            check_release_kept(ctx.family, self.root, self.named, ctx.limit, force=self.force)

    def where(self, family: Family, split: str) -> str:
        return str(self.root / family.repo_name(split))

    def published(self, ctx: BuildContext, split: str, *, needed: bool) -> Path | None:
        return self.root / ctx.family.repo_name(split)

    def held(self, family: Family, *, dry_run: bool) -> ContextManager[None]:
        return nullcontext() if dry_run else self._locked(family.name)

    @contextmanager
    def _locked(self, family: str) -> Iterator[None]:
        """Hold the target's publish lock, after finishing or undoing what a stopped publish left.

        The lock lives in the target, so a run that fails before it publishes anything into a folder
        it created removes the lock and that folder again: a failed first publish leaves no trace.
        """
        root = self.root
        created = [folder for folder in (root / local.CONTROL, root, *root.parents) if not folder.exists()]
        try:
            with publish_lock(root, family, local.CONTROL):
                local.recover(root, family)
                yield
        except BaseException:
            if created:
                (root / local.CONTROL / f"{family}.lock").unlink(missing_ok=True)
                for folder in created:  # deepest first; one holding anything (a published repo) stays
                    try:
                        folder.rmdir()
                    except OSError:
                        break
            raise

    def publish(
        self, family: Family, assembled: dict[str, Path], *, only: Sequence[str] | None, dry_run: bool, progress: bool
    ) -> dict[str, PublishResult]:
        """Make each `root/<repo>` identical to its assembled repo (within `only`), all of them in one transaction.

        Each repo that changes is laid out whole beside the target and switched in (`rs.pipeline.publish.local`):
        a reader sees the old repo or the new one, a full disk or a refused folder changes nothing, and
        a run killed at any point is finished or undone by the next.
        """
        root, name = self.root, family.name
        changes = {
            split: diff(scan_folder(repo), folder_state(root / repo.name), only=only, delete_extra=True)
            for split, repo in assembled.items()
        }
        results = {
            split: PublishResult(repo_id=(root / repo.name).as_posix(), changes=changes[split], commit_url=None)
            for split, repo in assembled.items()
        }
        changing = [
            split for split, listed in changes.items() if any(change.action != "unchanged" for change in listed)
        ]
        if dry_run or not changing:
            return results
        local.check_writable(root, [root / assembled[split].name for split in changing], self.named)
        txn = local.transaction(root, name)
        try:
            for split in changing:
                repo = assembled[split]
                with writing("the published repo", root / repo.name, flag=self.named):
                    local.prepare(repo, root / repo.name, changes[split], txn / "new" / repo.name)
            with writing("the publish journal", txn, flag=self.named):
                local.commit(root, name, [assembled[split].name for split in changing])
        except BaseException:
            local.abandon(root, name)  # before the commit: the published repos are as they were
            raise
        ledger.keep(f"{name}'s repos published in {root}")
        return results


@dataclass
class HubTarget(Target):
    """The Hub: each repo `namespace/<repo>`, published with `token` (resolved by `check`, unless a dry run)."""

    namespace: str
    token: str | None = None
    local = False

    def check(self, ctx: BuildContext, *, dry_run: bool) -> None:
        check_overlap(None, "--out", ctx.build_root, ctx.cache_path)
        check_trial(ctx.family, ctx.limit, local=False, dry_run=dry_run)
        if not dry_run:
            self.token = resolve_token(self.token)

    def where(self, family: Family, split: str) -> str:
        return f"{HUB_URL}/{self.namespace}/{family.repo_name(split)}"

    def published(self, ctx: BuildContext, split: str, *, needed: bool) -> Path | None:
        """The card inputs of the published repo (rs/*, the example images), downloaded into the build folder when needed."""
        if not needed:
            return None
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
        )

        repo_name = ctx.family.repo_name(split)
        repo_id, folder = f"{self.namespace}/{repo_name}", ctx.paths.root / "published" / repo_name
        try:
            snapshot_download(
                repo_id, repo_type="dataset", allow_patterns=["rs/*", "images/*"], local_dir=folder, token=self.token
            )
        except (
            RepositoryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
        ) as err:  # offline: not cached
            logger.warning("could not read the card inputs of %s: %s", repo_id, err)
            return None
        return folder

    def publish(
        self, family: Family, assembled: dict[str, Path], *, only: Sequence[str] | None, dry_run: bool, progress: bool
    ) -> dict[str, PublishResult]:
        """Upload each assembled repo to its Hub repo (or, on a dry run, say what would change)."""
        c = family.config
        results = {}
        for split, repo in assembled.items():
            repo_name = family.repo_name(split)
            results[split] = publish_folder(
                repo,
                f"{self.namespace}/{repo_name}",
                token=self.token,
                private=c.publish.private,
                only=only,
                dry_run=dry_run,
                commit_message=f"rs: publish {repo_name}",
                files_per_commit=c.publish.files_per_commit,
                progress=progress,
            )
            if not dry_run:
                ledger.keep(f"{self.namespace}/{repo_name} published on the Hub")
        return results


def target_for(family: Family, out: Path | None, *, token: str | None = None, force: bool = False) -> Target:
    """The family's target: `out` when given, else its `publish:` block (a local folder, or the Hub). `force`: a trial
    may replace a release in a local folder (a trial never goes to the Hub)."""
    c = family.config
    if out is None and c.publish.target != "local":
        return HubTarget(c.publish.namespace, token)
    folder = Path(out if out is not None else c.publish.local_dir)
    named = "--out" if out is not None else "publish.local_dir"
    try:  # the namespace was validated with the family; a name that slipped past still writes nowhere else
        root = confined(folder, c.publish.namespace)
    except PathEscapeError as err:
        raise UsageError(f"publish.namespace: {err}", hint="set publish.namespace to a Hub user or organisation name")
    return LocalTarget(folder, root, named, force=force)
