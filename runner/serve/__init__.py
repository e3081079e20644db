"""`runner serve`: the scheduler daemon, its pool, launcher and loops."""
