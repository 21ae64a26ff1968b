"""The verify-gated push to the Hugging Face Hub and the model card it publishes (reading the Hub, ``pull``
included, is ``read/``'s: ``hub_store``, ``hub_pull``)."""
