"""The dataset cards: every piece of card code, and nothing else.

    render.py    the card: Jinja over the family report, examples and overturns; its front matter; `check_card`
    inputs.py    what a card is rendered from: the build's report, examples and overturns, or a published repo's copies
    files.py     the card written into an assembled repo, with its figures and the inputs under `rs/`
    figures.py   the funnel and token-length figures (PNG, with their alt text)
    decontam.py  the decontamination section: its table, its example pairs, its lines in the summary and in `rs plan`
    html.py      a published card rendered as the Hub shows it (`python -m rs.pipeline.publish.cards.html`)

A new card section goes here: its text in a template `templates/card_<section>.md.jinja`, included from
`templates/card.md.jinja` (inside an `{% if %}` when not every repo has it); its numbers from the family report
(`rs.pipeline.write.report`, which the build fills) or, for numbers of the repo's own files, `render.card_numbers`,
passed to the template by `render.render_card`; a module of its own here when it needs more than the template (as
`decontam.py`); a file it shows written by `files.write_card`; its heading in `render.REQUIRED_SECTIONS` when every
card must have it. `rs audit` holds a card's statements against the repo's files: a checker for each new statement
goes in `rs/audit/checkers.py`.
"""
