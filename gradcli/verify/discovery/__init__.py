"""`check-function` over many Functions at once: finding them, and one line each."""
