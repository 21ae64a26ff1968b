"""The tool's version and the version of every JSON document it writes (one definition each)."""

__version__ = "0.1.0"
TOOL = "eagle-convert"  # the "tool" of every JSON document, SARIF's driver name
# inspect, verify, normalize and error documents share it: bumped only when a field changes meaning or goes away
SCHEMA_VERSION = 1
# where people read the docs: help texts and hints name these URLs (or commands), never a path in the repository,
# which an installed wheel does not have
PROJECT_URL = "https://github.com/eagle-convert/eagle-convert"
SCHEMAS_URL = f"{PROJECT_URL}/tree/main/eagle_convert/schemas"  # the JSON schemas of every report (package data too)


def docs_url(path: str, anchor: str | None = None) -> str:
    """The URL of ``path`` in the project's repository (``docs/ci.md``, ``eagle_convert/schemas/x.json``)."""
    return f"{PROJECT_URL}/blob/main/{path}" + (f"#{anchor}" if anchor else "")
