"""The data explorer: a static page at `/_/` that reads the service through its public API.

The page (`index.html`, `explorer.css`, `explorer.js` beside this file: plain files, no
build step, nothing fetched from elsewhere) lists the models of `/openapi.json`, pages
through records with the declared filters, sorts and projections, reads them `as_of` a
watermark, follows `/live-query` and `/subscribe`, and shows `/metrics` and `/snapshot`.
It is read and watch only. See docs/explorer.md.
"""

from dbsvc.explorer.page import ExplorerPage, explorer_enabled

__all__ = ["ExplorerPage", "explorer_enabled"]
