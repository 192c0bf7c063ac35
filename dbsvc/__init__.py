"""dbsvc: a database service compiled from a schema file.

The package is layered, and imports point one way only:
errors <- schema <- compiler <- runtime (storage, http, realtime, auth) <- app <- cli.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
