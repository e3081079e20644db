"""jobs.yaml and config.yaml: strict models, schedules, YAML loading."""
