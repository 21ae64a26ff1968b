"""The command line: thin modules that parse, call one library function and render."""
