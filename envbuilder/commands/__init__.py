"""One module per `envbuilder` subcommand; see `envbuilder.cli` for the interface."""
