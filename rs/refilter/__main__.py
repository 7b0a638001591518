from rs.cli import run_as_program
from rs.cli.refilter import main

run_as_program(main)
