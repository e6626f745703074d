"""Saved programs shipped with the package (``<name>.json`` and its ``<name>.meta.json``; the user's own live in
``files.programs_dir``, outside the package, and are found by name first), ``files``: what a
program file holds, how it is read, checked and written, and its content hash, and ``saving``: a judge built from a
program file, written to one, named by its content (``SavedProgram``, the part of ``Vista`` that meets this
folder). (The seed program's hand-written demos
and the script that writes ``seed.json`` from them are ``optimize.seed_program``'s: a build script imports the method,
which imports this folder.)

A program file is everything per model that changes verdicts: DSPy's state (each predictor's demos and
instructions, never an LM or a key) and, under the ``vista`` key, the judging options it was chosen with and its
decision rule. A program is identified by its content (``content_hash``), never by its name alone.
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "files": ("EVIDENCE_PROGRAM", "PROGRAM_FORMAT", "SEED_PROGRAM", "ProgramFile", "StaleMeta", "compiled_dir",
              "content_hash", "find_program", "program_folders", "program_path", "programs_dir", "read_program",
              "saved_programs", "write_program"),
    "saving": ("SavedProgram",),
})
