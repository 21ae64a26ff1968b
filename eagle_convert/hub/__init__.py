"""The Hugging Face Hub helpers: pull, the verify-gated push, and the model card it publishes."""
