"""Renderers: plain result data in, what to print out (rich lines for people, JSON and DOT text
for programs). They never print; `gradcli/cli/output.py` does. See contract.py and formats.py."""
