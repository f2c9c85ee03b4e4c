"""What the coordinator keeps: its tables and migrations (SQLite or Postgres), and where uploaded files live."""
