"""Reading what is on disk or on the Hub, strictly, and never modifying it: regular files (size-capped, UTF-8),
safetensors headers, shard indexes, the draft's and the target's configs with the type of every key read, Git LFS
pointers, pickle listings, the Hub store and ``pull``, digests, redaction, the fingerprints of every source read,
and the one check of where a command writes.

Below it only ``rules``, ``schemas``, ``engines``, ``errors`` and ``version``: nothing here detects what a draft is
(``draft/``) or models what an engine release does with it (``releases/``).
"""
