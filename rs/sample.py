"""`python -m rs.sample`: the entry point of `rs sample` (the command is `rs.cli.sample`; the stage, `rs.pipeline.sample`)."""

if __name__ == "__main__":
    from rs.cli import run_as_program
    from rs.util.long_lived import import_for_good

    run_as_program(import_for_good("rs.cli.sample").main)
