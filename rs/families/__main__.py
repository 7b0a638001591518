from rs.cli import run
from rs.cli.families import main

run(main)
