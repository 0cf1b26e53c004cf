"""Reproducible container images: the image a lock predicts, written by envbuilder.

The Docker engine runs the build steps (its legacy builder cannot be made deterministic: every
layer records when its files were written, the image config records when and in which container
each step ran). envbuilder then writes the final image itself: the base image's layers as they
are, every layer above them normalised like the `.wsl` (envbuilder.image.tar: sorted entries,
SOURCE_DATE_EPOCH mtimes, numeric owners, no logs, caches or random ids), and an image config
with fixed times. The image id (the sha256 of that config) then depends only on the lock and the
base image's digest. docs/reproducibility.md explains it for users.

Modules, one job each:
  blobs     stdlib only (.ci/seed_image.py uses it too): canonical JSON, digests, deterministic
            gzip, image config and manifest documents;
  layers    normalise one layer tar (a `docker save` layer) into its deterministic form;
  config    the deterministic image config made from the engine's;
  writer    the engine side: save the engine's image, normalise, write a docker-archive, load it
            and check that the engine's image id is the computed config digest;
  diff      name the first layer and file in which two images differ.

This file imports nothing, so `.ci/seed_image.py` (stdlib only) can import `blobs`.
"""
