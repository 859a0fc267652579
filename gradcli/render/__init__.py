"""Renderers: plain result data in, text out (rich for people, JSON and DOT for programs)."""
