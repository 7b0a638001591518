"""`python -m rs.publish`: the entry point of `rs publish` (the command is `rs.cli.publish`; the stage, `rs.pipeline.publish`)."""

if __name__ == "__main__":
    from rs.cli import run_as_program
    from rs.cli.publish import main

    run_as_program(main)
