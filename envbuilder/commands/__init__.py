"""One module per `envbuilder` subcommand; see `envbuilder.commands._cli` for the interface."""
