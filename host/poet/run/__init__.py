"""The parts of a `poet train` run (poet.train puts them together): its folder and its files (folder), its
plan and the plan cache (plans), its epochs on the board (loop), and a finished run's files (finish)."""
