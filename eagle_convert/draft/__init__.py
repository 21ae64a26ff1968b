"""What a draft *is*: tensor-name layouts and mappings, producers, aux-layer ids, flags, detection, truth.

Computed once per command from the checkpoint, the declared options and the target's config; it never asks an
engine release (``releases/`` is its sibling, never imported here): ``gate/`` joins the two.
"""
