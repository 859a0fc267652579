"""`gradcli list`: the operations and the expression library."""

from __future__ import annotations

from .app import JsonOption, LibraryOption, app, reports_errors


@app.command("list")
@reports_errors
def list_command(library: LibraryOption = None, json: JsonOption = False) -> None:
    """List the expression library (name, signature, one line, source) and the operations.

    Example:  gradcli list --json
    """
    from ..language.library import library_folders, load_library
    from ..render.listing import listing_data, render_listing

    data = listing_data(load_library(library_folders(library or ())))
    render_listing(data, as_json=json)
