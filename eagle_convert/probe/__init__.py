"""The acceptance probe: the target's text and hidden states, the readings of the draft, and their statistics; the
session of the levels that run the reference (``session``: the draft and target read once, what runs on them built
once), shared by verify's value levels and normalize's ``--aux-convention auto``."""
