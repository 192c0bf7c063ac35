"""Data tools: export, import, backup and restore of one tenant (docs/data-tools.md).

    export.py    `dbsvc export`: records as JSON Lines, the tenant locked and opened read-only
    load.py      `dbsvc import`: JSON Lines in, validated and checked as a set, one fsync
    lines.py     the JSON Lines format both of them speak
    backup.py    `dbsvc backup` beside a running server; `dbsvc tenant create --from` restores
    tenant.py    which tenant (SERVICE_DATA, SERVICE_TENANT) and the locked read-only open
    progress.py  a progress bar on a terminal, plain lines otherwise
    commands.py  the command bodies `dbsvc.cli` calls

Layering: above storage, compiler and config, beside app (it serves nothing); only the
command line imports it.
"""
