"""gradcli's expression language: a small AST, its allow-list parser and the operations table."""
