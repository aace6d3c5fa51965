"""The operator's side of a pool's database: its URL, what the server says, the runs handed back."""
