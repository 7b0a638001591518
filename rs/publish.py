"""`python -m rs.publish`: the entry point of `rs publish` (the command is `rs.cli.publish`; the stage, `rs.pipeline.publish`)."""

if __name__ == "__main__":
    from rs.cli import run_as_program
    from rs.util.long_lived import import_for_good

    run_as_program(import_for_good("rs.cli.publish").main)
