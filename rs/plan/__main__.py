from rs.cli import run
from rs.cli.plan import main

run(main)
