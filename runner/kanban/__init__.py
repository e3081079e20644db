"""Kanban: a task board in runner.db, a dispatcher that starts worker processes, and the worker.

``model.py`` (values and errors), ``board.py`` (tables, transitions, claims with fencing),
``dispatch.py`` (the dispatcher: ``tick(now)``), ``work.py`` (``runner kanban work``).
"""
