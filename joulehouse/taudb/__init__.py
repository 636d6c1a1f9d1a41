"""TAUdb: the schema, the TAU profile readers, and the trial loader."""
