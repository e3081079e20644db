"""Safety: the shell-command classifier (``shell/``), approval policies, redaction and the
prompt-injection scan. Import the submodules; this package imports nothing."""
