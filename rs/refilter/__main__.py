from rs.cli import run
from rs.cli.refilter import main

run(main)
