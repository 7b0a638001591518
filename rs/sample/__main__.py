from rs.cli import run
from rs.cli.sample import main

run(main)
