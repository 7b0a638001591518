"""Stage 6: publishing a family: its repos laid out exactly as on the Hub, their cards rendered, pushed in one step.

The command is `rs publish FAMILY` / `python -m rs.publish FAMILY` (`rs.cli.publish`). One module per job: the stage
(`stage`: `publish`, `PublishStage`), what is refused before any work (`preflight`), each repo assembled in the build
folder (`assemble`; its card and the files the card is rendered from, `cards`), what the Hub and its viewer would refuse
of them (`repo_check`), and the target that receives them (`targets`: a local folder, switched in as one transaction by
`local`, or the Hub). The package imports none of them: `preflight` is checked before a run without the build's
libraries (`datasets`) loaded.
"""
