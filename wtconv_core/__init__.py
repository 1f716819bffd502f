"""Project-wide basics every other package uses: errors, paths, inputs, progress, the version, atomic file writes,
percentiles (docs/design.md §1). Imports no other project package."""
