"""The "note" target's builder: writes dist/<env>.note from the env's verified lock."""

from __future__ import annotations

from pathlib import Path

from envbuilder.core.errors import ValidationError
from envbuilder.core.fsutil import atomic_write_bytes, sha256_bytes
from envbuilder.core.model import EnvSpec
from envbuilder.core.progress import ProgressFn
from envbuilder.core.project import Project
from envbuilder.lock.verified import load_verified_lock
from envbuilder.targets.base import Artifact, BuildOptions, ValidateOptions
from fourth_target import NAME, NoteTable


class NoteBuilder:
    def build(
        self, project: Project, env: EnvSpec, options: BuildOptions, progress: ProgressFn
    ) -> Artifact:
        verified = load_verified_lock(project, env.name, NAME, env.spec_hash)
        table = env.table(NoteTable)
        message = table.message if table is not None else ""
        data = f"{message}\nlock {verified.pylock.entry.pylock_sha256}\n".encode()
        path = project.dist / f"{env.name}.note"
        atomic_write_bytes(path, data)
        progress(f"{env.name}/{NAME}: wrote {path}", 1, 1)
        return Artifact(NAME, env.name, str(path), sha256_bytes(data), {"changed": "yes"})

    def validate(
        self, project: Project, env: EnvSpec, options: ValidateOptions, progress: ProgressFn
    ) -> Path:
        raise ValidationError("a note has no probe to run")
