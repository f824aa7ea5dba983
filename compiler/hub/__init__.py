"""A small model zoo defined with xmge's own API."""
