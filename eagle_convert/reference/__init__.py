"""Reference target models in pure PyTorch, one file per architecture, checked against transformers in tests."""
