"""Numbered, append-only schema migrations: ``mNNNN_name.py`` with ``apply(db)``.

Never edit a migration that has landed; add a new file. Names sort in apply order.
"""
