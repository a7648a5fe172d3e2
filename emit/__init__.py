"""emit layer."""
