"""The acceptance probe: the target's text and hidden states, the readings of the draft, and their statistics."""
