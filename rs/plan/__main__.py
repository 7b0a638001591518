from rs.cli import run_as_program
from rs.cli.plan import main

run_as_program(main)
