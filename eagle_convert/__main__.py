"""`python -m eagle_convert` runs the CLI."""

from eagle_convert.cli.main import run

run()
