"""How many workers a pool may run: the connection budget against every limit the server enforces."""
