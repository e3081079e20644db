"""Command safety: classify shell commands as safe, dangerous or hardline.

``classify(command)`` is pure and fast; policies, approvals and redaction build on it.
"""

from runner.safety.shell.classify import Verdict, classify

__all__ = ["Verdict", "classify"]
