"""Memory: bounded notebooks a job's runs keep across runs (issue 18; docs/memory.md).

``notebook`` is the value and its edits, ``notebooks`` the store side, ``write`` a run's write
(redaction, scan, event) and the system prompt's frozen snapshot, ``held`` the notes the scan
flagged, held for the operator.
"""
