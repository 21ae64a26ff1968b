"""`python -m eagle_convert` runs the CLI (signals handled from the entry's first line: cli/entry.py)."""

from eagle_convert.cli.entry import run

run()
