"""aot layer."""
