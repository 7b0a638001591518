"""A card as a reader on the Hub sees it: its Markdown rendered to HTML, to look at before publishing.

`python -m rs.pipeline.publish.cards.html OUT/NAMESPACE/REPO ... --to DIR` writes `DIR/REPO.html` for each repo folder
(`python -m rs.publish FAMILY --out OUT` or `--cards-only --out OUT` first); open them in a browser.

Rendered as the Hub does: GitHub-flavoured Markdown (tables, strikethrough) by a CommonMark parser,
the YAML front matter left out (the Hub shows it as metadata, not text), raw HTML kept only where an
allowlist of tags and attributes admits it (the Hub sanitises cards too), relative links resolved
against the repo folder. `render` also lists what a reader would see broken: markup the sanitiser had
to drop, images or links to files the repo lacks, Markdown or HTML or entities shown as literal text
outside the dataset text the card quotes. The tests check the published cards have none.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterable
from urllib.parse import unquote, urlsplit

from huggingface_hub import DatasetCard
from markdown_it import MarkdownIt

ALLOWED = {
    **{
        t: ()
        for t in (
            "blockquote",
            "br",
            "del",
            "details",
            "em",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "hr",
            "li",
            "ol",
            "p",
            "pre",
            "s",
            "strong",
            "summary",
            "table",
            "tbody",
            "thead",
            "tr",
            "ul",
            "b",
            "i",
            "kbd",
            "sub",
            "sup",
        )
    },
    "a": ("href",),
    "img": ("src", "alt"),
    "code": ("class",),
    "th": ("style",),
    "td": ("style",),
}
"""Tags and their attributes a card may use: what Markdown itself produces, and <details>/<pre> for long fields."""

DROPPED_WITH_CONTENT = {"script", "style", "iframe", "object", "embed", "template"}
VOID = {"br", "hr", "img"}

LITERAL_SYNTAX = {
    "a character reference": re.compile(r"&#?[A-Za-z0-9]+;"),
    "a backslash escape": re.compile(r"\\[\\`*_{}\[\]()#+\-.!|~<>]"),
    "emphasis markers": re.compile(r"\*\*|__"),
    "a table row": re.compile(r"^[ \t]*\|.*\|[ \t]*$", re.M),
    "a link or image": re.compile(r"!?\[[^\]]*\]\([^)]*\)"),
    "an HTML tag": re.compile(r"</?(?:details|summary|pre|code|br|b|em|strong|img|a)\b[^>]*>"),
}
"""Markdown or HTML a reader should never see as text: on a card it means a template escaped twice or not at
all. The dataset's own text may hold any of it, shown literally on purpose: `render` is told what the card quotes."""


@dataclass
class Rendered:
    html: str
    """The card's body as sanitised HTML, links resolved against the repo folder."""
    text: str
    """What a reader reads outside code, entities decoded: where Markdown syntax left as text would show."""
    code: str
    """What a reader reads in code blocks and spans, where entities are not decoded: where `&#95;` would show."""
    problems: list[str] = field(default_factory=list)
    """What a reader would see broken: markup the sanitiser dropped, links and images to files the repo lacks,
    markup shown as literal text. Empty for a card that renders as meant."""


class _Sanitiser(HTMLParser):
    """Rebuilds the HTML keeping only allowed tags and attributes; notes what it drops and the visible text."""

    def __init__(self, folder: Path) -> None:
        super().__init__(convert_charrefs=True)
        self.folder, self.out, self.problems = folder, [], []
        self.text: list[str] = []  # visible text outside <code>/<pre>
        self.code: list[str] = []  # and inside
        self._skip = 0  # inside a tag dropped with its content
        self._code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in DROPPED_WITH_CONTENT:
            self._skip += 1
            self.problems.append(f"<{tag}> dropped with its content")
            return
        if self._skip:
            return
        if tag not in ALLOWED:
            self.problems.append(f"<{tag}> dropped")
            return
        kept = []
        for name, value in attrs:
            if name not in ALLOWED[tag] or value is None:
                self.problems.append(f"<{tag} {name}> dropped")
                continue
            if name in ("href", "src"):
                value = self._resolve(tag, value)
                if value is None:
                    continue
            kept.append(f' {name}="{html.escape(value)}"')
            if name == "alt":  # read aloud, or shown where the image fails: text like any other
                self.text.append(f"\n{value}\n")
        self.out.append(f"<{tag}{''.join(kept)}>")
        self._code += tag in ("code", "pre")

    def handle_endtag(self, tag: str) -> None:
        if tag in DROPPED_WITH_CONTENT:
            self._skip = max(0, self._skip - 1)
        elif not self._skip and tag in ALLOWED and tag not in VOID:
            self.out.append(f"</{tag}>")
            self._code = max(0, self._code - (tag in ("code", "pre")))

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.out.append(html.escape(data, quote=False))
            (self.code if self._code else self.text).append(data)

    def _resolve(self, tag: str, url: str) -> str | None:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "mailto") or url.startswith("#"):
            return url
        if parts.scheme:
            self.problems.append(f"<{tag}> to {url!r} dropped")
            return None
        target = (self.folder / unquote(parts.path)).resolve()
        if not target.is_file():
            self.problems.append(f"<{tag}> to {url} : no such file in or beside the repo")
        return target.as_uri() + (f"#{parts.fragment}" if parts.fragment else "")


_MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def render(card_text: str, repo_folder: str | Path, quoted: Iterable[str] = ()) -> Rendered:
    """The body of a README.md (front matter left out) as the Hub would show it, and what would look broken.

    `quoted`: the dataset text the card quotes (questions, answers), which may hold any syntax on purpose."""
    sanitiser = _Sanitiser(Path(repo_folder).resolve())
    sanitiser.feed(_MARKDOWN.render(DatasetCard(card_text).text))
    sanitiser.close()
    text, code = "".join(sanitiser.text), "".join(sanitiser.code)
    return Rendered("".join(sanitiser.out), text, code, sanitiser.problems + _literal_syntax(text, code, quoted))


def render_repo(repo_folder: str | Path) -> Rendered:
    """A published repo's README.md rendered, its quoted dataset text taken from the repo's rs/examples.json and
    rs/overturns.json (what `--cards-only` renders the card from)."""
    folder = Path(repo_folder)
    quoted = []
    for name in ("examples.json", "overturns.json"):
        if (folder / "rs" / name).is_file():
            for entry in json.loads((folder / "rs" / name).read_text(encoding="utf-8")):
                fields = entry.get("qa", entry)
                quoted += [line for v in fields.values() if isinstance(v, str) for line in v.splitlines()]
    return render((folder / "README.md").read_text(encoding="utf-8"), folder, quoted)


def _literal_syntax(text: str, code: str, quoted: Iterable[str]) -> list[str]:
    """Markup shown as literal text (LITERAL_SYNTAX) outside the `quoted` dataset text. Inside code only character
    references count: a `&#95;` there shows as written, a `**` is the code's own."""
    for q in sorted(set(quoted), key=len, reverse=True):
        if any(pattern.search(q) for pattern in LITERAL_SYNTAX.values()):  # only what could hide a leak is left out
            text, code = text.replace(q, ""), code.replace(q, "")
    found = [
        f"a character reference shown in code: {m.group(0)!r}"
        for m in LITERAL_SYNTAX["a character reference"].finditer(code)
    ]
    for what, pattern in LITERAL_SYNTAX.items():
        found += [f"{what} shown as text: {m.group(0)!r}" for m in pattern.finditer(text)]
    return found


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font: 15px/1.6 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; color: #1f2328;
       max-width: 980px; margin: 24px auto; padding: 0 24px; }}
h1, h2 {{ border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; }}
code, pre {{ font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa;
            border-radius: 6px; }}
code {{ padding: .2em .4em; }}
pre {{ padding: 16px; overflow: auto; }}
pre code {{ padding: 0; white-space: pre-wrap; }}
table {{ border-collapse: collapse; display: block; overflow: auto; }}
th, td {{ border: 1px solid #d1d9e0; padding: 6px 13px; vertical-align: top; }}
tr:nth-child(2n) {{ background: #f6f8fa; }}
img {{ max-width: 100%; }}
blockquote {{ margin: 0; padding: 0 1em; color: #59636e; border-left: .25em solid #d1d9e0; }}
summary {{ cursor: pointer; }}
</style></head><body>
{body}
</body></html>
"""


def page(rendered: Rendered, title: str) -> str:
    """A standalone HTML page around a rendered card, styled like GitHub's and the Hub's Markdown."""
    return _PAGE.format(title=html.escape(title), body=rendered.html)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rs.pipeline.publish.cards.html", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "repos", nargs="+", type=Path, metavar="REPO", help="a published repo folder (holding README.md)"
    )
    parser.add_argument("--to", type=Path, required=True, metavar="DIR", help="where to write REPO.html")
    args = parser.parse_args(argv)
    args.to.mkdir(parents=True, exist_ok=True)
    status = 0
    for repo in args.repos:
        rendered = render_repo(repo)
        target = args.to / f"{repo.resolve().name}.html"
        target.write_text(page(rendered, repo.name), encoding="utf-8")
        print(target)
        for problem in rendered.problems:
            print(f"  {repo.name}: {problem}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
