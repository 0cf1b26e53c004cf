"""Builders: what `envbuilder build`, `validate`, `push` and `pull` run for a target (the
`Builder` protocol of `envbuilder.targets.base`). A target's descriptor names its builder
("envbuilder.builders.docker:DockerBuilder"); it is imported only when a command needs it.

    docker.py   DockerBuilder: images, through the docker SDK
    wsl2.py     Wsl2Builder: the .wsl file (a Docker-built root filesystem, normalised)
    venv.py     NativeVenvBuilder, WindowsVenvBuilder: venvs made with uv
    proberun.py what every builder passes to the probe
"""
