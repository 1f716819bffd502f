"""The Python API of wtconv-trt: one module per job, every check and default made inside it, one-line errors in
the API's own words before any slow work (docs/api.md)."""
