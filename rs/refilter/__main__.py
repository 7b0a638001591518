from rs.cli import run_as_program
from rs.util.long_lived import import_for_good

run_as_program(import_for_good("rs.cli.refilter").main)
