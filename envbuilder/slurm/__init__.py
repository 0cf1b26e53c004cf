"""Validating an env across a Slurm cluster (issue 16): every node, and collectives between nodes.

    script   slurm/<env>/validate.sbatch: what it is rendered from, and rendering it
    facts    envbuilder/data/slurm.toml: how each container runtime starts the env on a node
    job      Slurm's client commands: submit (sbatch), poll (squeue/scontrol/sacct), cancel
    run      `envbuilder validate --slurm`: stage the probe, submit, follow, collect, fleet report

The batch script needs nothing of envbuilder on the nodes: it runs the probe zipapp (staged
beside it in a shared folder) in the image pinned by digest, or in a venv on a shared file
system. The fleet report over its results is envbuilder.report.fleet.
"""
