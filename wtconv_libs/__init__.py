"""The compiled libraries built from ``plugin/``: where they are found, building them with CMake, and reading a
plugin library's ELF file without loading it (docs/design.md §1; docs/engines.md, "Compiled libraries")."""
