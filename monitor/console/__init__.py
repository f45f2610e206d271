"""What every command of the command line shares: exit codes, one-line errors, the config option,
the store, who the command line is, how results and logs are printed.

It knows no command: each concept's commands are its package's `cli` module, and the command table
(`monitor.cli.app`) puts them together.
"""
