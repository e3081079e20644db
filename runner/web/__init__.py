"""The web dashboard (``runner web``, ``runner serve --web``): see docs/web.md.

Needs the ``web`` extra (starlette, uvicorn, prometheus_client, markdown-it-py); nothing outside
this package imports it, so commands that do not serve the web never load them.
"""
