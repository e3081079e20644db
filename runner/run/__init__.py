"""One run of one job: prepare, execute, deliver."""
