"""How a dbsvc process ends: its exit statuses, and the one place errors become them.

    0  success
    1  failure: a schema with errors, a failed operation, an I/O error
    2  usage or configuration: bad arguments, a bad SERVICE_* value, a missing runtime
       package, a tenant locked by another process (nothing was touched)
    3  diverged: `dbsvc replicate --out FILE` found that the server's history is no
       longer FILE's (docs/replication.md, "Histories"); FILE was left as it was, and
       resuming cannot help, so a supervisor must not simply restart it

Three entry points end through `run_reporting`: the command line (`dbsvc.cli.main`, also
inside a built app) and a generated module run as a script (`dbsvc.service.main`). A known
error is one `dbsvc: error: MESSAGE` line on standard error, never a traceback; anything
else is a bug and keeps its traceback.

Imports only the standard library, `dbsvc.errors` and `dbsvc.deps` at module level.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from dbsvc.deps import translate_import_error
from dbsvc.errors import ConfigError, DbsvcError, HistoryDiverged, SchemaErrors, TenantLocked

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3


def report(message: str) -> None:
    """One error line on standard error, in the form every dbsvc command uses (a server
    logging JSON lines writes it as one: `reporter`)."""
    if reporter:
        reporter[0](message)
        return
    print(f"dbsvc: error: {message}", file=sys.stderr)


# A server with SERVICE_LOG_FORMAT=json puts its writer of JSON error lines here
# (logs.configure_logging), so that its last line, too, is one JSON object.
reporter: list[Callable[[str], None]] = []


def run_reporting(action: Callable[[], int]) -> int:
    """`action()`'s exit status, or the status of the known error it raised, reported."""
    try:
        return action()
    except SchemaErrors as exc:
        from dbsvc.schema import format_errors

        print(format_errors(exc), file=sys.stderr)
        return EXIT_FAILURE
    except (ConfigError, TenantLocked) as exc:
        report(str(exc))
        return EXIT_USAGE
    except HistoryDiverged as exc:
        report(str(exc))
        return EXIT_DIVERGED
    except (DbsvcError, OSError) as exc:
        report(str(exc))
        return EXIT_FAILURE
    except ModuleNotFoundError as exc:
        missing = translate_import_error(exc)
        if missing is None:
            raise  # not a runtime package: a real bug
        report(str(missing))
        return EXIT_USAGE
