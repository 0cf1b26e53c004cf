"""What this host has: doctor's checks, Python interpreters, wsl.exe, and the known error
messages `envbuilder explain` knows."""
