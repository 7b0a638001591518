"""The dataset cards: rendered from the family report (`render`), their figures, the decontamination section, and
the card as the Hub shows it (`html`). A new card section is a template in `templates/` and its numbers here."""
