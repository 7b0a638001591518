from rs.cli import run
from rs.cli.publish import main

run(main)
