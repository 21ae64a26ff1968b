"""The tool's version and the version of every JSON document it writes (one definition each)."""

__version__ = "0.1.0"
# inspect, verify, normalize and error documents share it: bumped only when a field changes meaning or goes away
SCHEMA_VERSION = 1
