"""`python -m rs.sample`: the entry point of `rs sample` (the command is `rs.cli.sample`; the stage, `rs.pipeline.sample`)."""

if __name__ == "__main__":
    from rs.cli import run_as_program
    from rs.cli.sample import main

    run_as_program(main)
