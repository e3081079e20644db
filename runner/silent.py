"""``[SILENT]``: a run's output that means "nothing to report" (kept, never delivered).

The rule, one place for delivery, ``run-job``'s summary and the search index: the output, with
its leading whitespace (spaces, blank lines) removed, starts with ``[SILENT]``, exactly so
(upper case, both brackets). ``[SILENT]`` alone, ``[SILENT] No changes detected`` and a first
non-empty line ``[SILENT]`` with more lines after it count; ``[SILENT]`` on a later line,
``[silent]``, ``[SILENT`` or ``**[SILENT]**`` do not.
"""

from __future__ import annotations

SILENT = "[SILENT]"


def is_silent(output: str) -> bool:
    """Whether ``output`` says "nothing to report" (the rule above)."""
    return output.lstrip().startswith(SILENT)
