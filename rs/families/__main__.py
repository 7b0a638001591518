from rs.cli import run_as_program
from rs.cli.families import main

run_as_program(main)
