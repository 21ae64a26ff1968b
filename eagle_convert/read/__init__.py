"""Reading what is on disk or on the Hub, strictly: safetensors headers, shard indexes, configs, pickle listings.

The bottom layer (only ``errors`` below it); nothing here knows what a draft is or what an engine does.
"""
